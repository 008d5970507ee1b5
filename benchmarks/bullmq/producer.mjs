// The producer's side of BullMQ, as benchmarks/peers/produce.py measures the Python systems:
// `node producer.mjs add N` awaits one Queue.add at a time; `node producer.mjs addBulk N` sends
// Queue.addBulk calls of 1,000 jobs. Every job carries the same three small fields; connecting and a
// warm-up of 200 jobs stay outside the clock. Prints {"rate", "p50_us", "p99_us", "calls", "cpu_us"} (CPU µs a job).
import { Queue } from "bullmq";

const url = new URL(process.env.REDIS_URL);
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const FIELDS = { order_id: "1042", email: "ada@example.com", seat: "12C" };
const OPTS = { removeOnComplete: true };
const WARM_UP = 200;
const BATCH = 1000;
const [mode, countText] = process.argv.slice(2);
const count = Number(countText);
const queue = new Queue("bench", { connection });

const perCall = mode === "addBulk" ? BATCH : 1;
const call =
  mode === "addBulk"
    ? () => queue.addBulk(Array.from({ length: BATCH }, () => ({ name: "noop", data: FIELDS, opts: OPTS })))
    : () => queue.add("noop", FIELDS, OPTS);
for (let i = 0; i < Math.max(1, WARM_UP / perCall); i += 1) await call();
const latencies = [];
const cpu = process.cpuUsage();
const started = process.hrtime.bigint();
for (let i = 0; i < count / perCall; i += 1) {
  const before = process.hrtime.bigint();
  await call();
  latencies.push(Number(process.hrtime.bigint() - before));
}
const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
const used = process.cpuUsage(cpu);
latencies.sort((a, b) => a - b);
const rank = (q) => latencies[Math.max(1, Math.min(latencies.length, Math.ceil((q / 100) * latencies.length))) - 1] / 1000;
const cpu_us = (used.user + used.system) / count;
console.log(JSON.stringify({ rate: count / elapsed, calls: latencies.length, p50_us: rank(50), p99_us: rank(99), cpu_us }));
await queue.close();
