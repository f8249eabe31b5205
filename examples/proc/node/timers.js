// timers — a node.js event loop for kioku's process tests: one chain of STEPS steps, each
// scheduling the next through another mechanism in turn (setImmediate, setTimeout,
// process.nextTick, a resolved promise, a setInterval that clears itself after three ticks),
// with some allocation per step so the garbage collector runs. Only one callback of the chain
// is pending at any time, so the output (a line per 500 steps with a hash) is the same on
// every run, however long each wait takes.
//
// Usage: node timers.js STEPS
'use strict';

const steps = Number(process.argv[2] || 2000);
let step = 0;
let hash = 2166136261;
const kept = [];

function mix(v) {
  hash = Math.imul(hash ^ (v & 0xffffffff), 16777619) >>> 0;
}

function work() {
  const items = [];
  for (let i = 0; i < 200; i++) {
    items.push({ i, s: `${step}:${i}` });
  }
  let h = 0;
  for (const it of items) {
    h = (Math.imul(h, 31) + it.s.length + it.i) | 0;
  }
  kept.push(items[step % 200]);
  if (kept.length > 1000) kept.shift();
  mix(h);
}

function next() {
  step++;
  mix(step);
  work();
  if (step % 500 === 0) {
    console.log(`step ${step} hash ${hash.toString(16).padStart(8, '0')} kept ${kept.length}`);
  }
  if (step >= steps) {
    console.log(`done: ${steps} steps, hash ${hash.toString(16).padStart(8, '0')}`);
    return;
  }
  switch (step % 5) {
    case 0:
      setImmediate(next);
      break;
    case 1:
      setTimeout(next, 1);
      break;
    case 2:
      process.nextTick(next);
      break;
    case 3:
      Promise.resolve(step).then((v) => {
        mix(v * 7);
        next();
      });
      break;
    default: {
      let ticks = 0;
      const t = setInterval(() => {
        ticks++;
        mix(ticks);
        if (ticks === 3) {
          clearInterval(t);
          next();
        }
      }, 1);
    }
  }
}

next();
