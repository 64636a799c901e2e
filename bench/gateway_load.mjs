// The load generator of `python -m bench gateway`: Node's own http client, keep-alive.
// Usage: node gateway_load.mjs '{"url": ..., "mode": "open"|"closed", ...}'
// open: a request every 1/rate s for `seconds`, latency from each one's scheduled start
//   (a late generator counts against the path measured, never hides it);
// closed: `connections` callers back to back until `requests` are answered;
// replay: each of `requests` ({at_s, headers, body}, read from the file `spec.file`) sent
//   at its time; prints [status, latency ms] per request, in order, instead.
// Prints one JSON line: count, errors, p50/p90/p99 ms, requests/s, the generator's CPU s.
import { readFileSync } from "node:fs";
import http from "node:http";

const spec = JSON.parse(process.argv[2]);
const url = new URL(spec.url);
const body = Buffer.from(JSON.stringify(spec.body ?? {}));
const agent = new http.Agent({ keepAlive: true, maxSockets: spec.connections ?? 64 });
const headers = {
  "content-type": "application/json", "content-length": body.length, ...(spec.headers ?? {}),
};

function post(data = body, extra = headers) {
  return new Promise((resolve) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: url.pathname, method: "POST", agent,
        headers: extra },
      (res) => { res.on("data", () => {}); res.on("end", () => resolve(res.statusCode)); },
    );
    req.on("error", () => resolve(0));
    req.end(data);
  });
}

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms
const latencies = [];
let errors = 0;

async function one(at) {
  const status = await post();
  if (status !== 200) errors += 1;
  latencies.push(now() - at);
}

async function openLoop() {
  const n = Math.round(spec.rate * spec.seconds);
  const gap = 1000 / spec.rate;
  const start = now() + 50;
  const pending = [];
  let i = 0;
  await new Promise((done) => {
    const tick = () => {
      const t = now();
      while (i < n && start + i * gap <= t) pending.push(one(start + i++ * gap));
      if (i < n) setTimeout(tick, Math.max(0, Math.min(1, start + i * gap - now()))); else done();
    };
    tick();
  });
  await Promise.all(pending);
  return (now() - start) / 1000;
}

async function closedLoop() {
  let left = spec.requests;
  const start = now();
  const caller = async () => {
    while (left > 0) {
      left -= 1;
      const t = now();
      await one(t);
    }
  };
  await Promise.all(Array.from({ length: spec.connections }, caller));
  return (now() - start) / 1000;
}

async function replay() {
  const jobs = JSON.parse(readFileSync(spec.file, "utf8"));
  const start = now() + 50;
  const results = await Promise.all(jobs.map(async (job) => {
    const at = start + 1000 * job.at_s;
    await new Promise((done) => setTimeout(done, Math.max(0, at - now())));
    const data = Buffer.from(JSON.stringify(job.body));
    const status = await post(data, {
      "content-type": "application/json", "content-length": data.length, ...job.headers,
    });
    return [status, now() - at];
  }));
  console.log(JSON.stringify(results));
  agent.destroy();
}

if (spec.mode === "replay") {
  await replay();
  process.exit(0);
}
const cpu0 = process.cpuUsage();
const took = spec.mode === "open" ? await openLoop() : await closedLoop();
const cpu = process.cpuUsage(cpu0);
latencies.sort((a, b) => a - b);
const pct = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
console.log(JSON.stringify({
  requests: latencies.length, errors, p50_ms: pct(0.5), p90_ms: pct(0.9), p99_ms: pct(0.99),
  requests_per_s: latencies.length / took, generator_cpu_s: (cpu.user + cpu.system) / 1e6,
  seconds: took,
}));
agent.destroy();
