// BullMQ on Node beside this worker: concurrency 8, completed jobs removed
// (removeOnComplete: this worker keeps none either). The same command line and
// probe protocol as benchmarks/probe.py: `enqueue KIND N` prints {"rate": jobs/s};
// `work KIND` runs until PROBE_JOBS jobs finished, writes PROBE_FILE and exits.
// Enqueue: Queue.addBulk, 1,000 jobs a call. It lives beside its node_modules.
import { writeFileSync, renameSync } from "node:fs";
import { Queue, Worker } from "bullmq";

const url = new URL(process.env.REDIS_URL);
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const [command, kind, countText] = process.argv.slice(2);
const QUEUE = "bench";

if (command === "enqueue") {
  const count = Number(countText);
  const queue = new Queue(QUEUE, { connection });
  const started = performance.now();
  for (let low = 0; low < count; low += 1000) {
    const size = Math.min(count, low + 1000) - low;
    await queue.addBulk(Array.from({ length: size }, () => ({ name: kind, data: {}, opts: { removeOnComplete: true } })));
  }
  const rate = count / ((performance.now() - started) / 1000);
  await queue.close();
  console.log(JSON.stringify({ rate }));
} else {
  const target = Number(process.env.PROBE_JOBS);
  let count = 0;
  let first = 0;
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const done = () => {
    const now = Date.now() / 1000;
    count += 1;
    if (count === 1) first = now;
    if (count === target) {
      const tmp = `${process.env.PROBE_FILE}.tmp`;
      writeFileSync(tmp, JSON.stringify({ count, first, last: now, delays: [], rss: [] }));
      renameSync(tmp, process.env.PROBE_FILE);
      process.exit(0);
    }
  };
  new Worker(
    QUEUE,
    async (job) => {
      if (job.name === "sleep10") await sleep(10);
      done();
    },
    { connection, concurrency: 8 },
  );
}
