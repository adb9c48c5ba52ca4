// The Debian packages that tests start (Chromium, nginx, PostgreSQL) are never a reason to skip:
// a test that lacks one fails, and its message says how to install it.

/** The error of a test whose program is missing: `what` names it, `debianPackage` installs it. */
export function notInstalled(what: string, debianPackage: string): Error {
  return new Error(
    `${what} is not installed: bash scripts/system-packages.sh installs it (npm test runs it first), or sudo apt-get install -y ${debianPackage}`,
  );
}
