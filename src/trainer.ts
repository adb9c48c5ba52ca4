// `agl/trainer`: the Trainer, which runs an algorithm from `agl/algorithms` with a store, a server
// and runners (in this process or in processes it starts), and the datasets it reads. It loads
// DuckDB, the server and the OpenTelemetry SDK; the algorithms alone load none of them.
export { Trainer, type TrainerOptions } from './runtime/trainer.js';
export { loadDataset, type Dataset } from './runtime/dataset.js';
