import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './postgres.js';
import { notInstalled } from './system-packages.js';

// nginx from Debian's packages as the HTTP load balancer in front of several agl servers, the
// way a fleet is deployed (docs/scale-out.md): round robin, keep-alive to the servers, bodies
// streamed through, long polls held open.

const NGINX = '/usr/sbin/nginx';

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** The nginx configuration: one upstream of `servers`, one listener on 127.0.0.1:`port`. */
function config(dir: string, port: number, servers: string[]): string {
  const upstreams = servers.map((url) => `server ${new URL(url).host} max_fails=1 fail_timeout=2s;`).join('\n    ');
  // As root, nginx's workers would run as nobody, who may not use the temp folder.
  const user = process.getuid?.() === 0 ? 'user root;' : '';
  return `${user}
daemon off;
worker_processes 2;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  client_max_body_size 64m;
  upstream agl {
    ${upstreams}
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://agl;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 120s;
    }
  }
}
`;
}

function accepting(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export interface Proxy {
  readonly url: string;
  stop(): Promise<void>;
}

/** nginx in front of `servers` (their http://host:port URLs); stop it with `stop`. */
export async function startProxy(servers: string[]): Promise<Proxy> {
  if (!existsSync(NGINX)) throw notInstalled(`nginx (${NGINX})`, 'nginx');
  const dir = await mkdtemp(join(tmpdir(), 'agl-nginx-'));
  const port = await freePort();
  await writeFile(join(dir, 'nginx.conf'), config(dir, port, servers));
  const child = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  running.add(child);
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk));
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );
  for (let i = 0; !(await accepting(port)); i++) {
    if (child.exitCode !== null || i === 100) throw new Error(`nginx did not start:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
