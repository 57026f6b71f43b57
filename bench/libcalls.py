"""Measures Python limits' hit, unchanged, against Redis or sluice
(bench/libraries.sh runs it):
  python3 bench/libcalls.py fixed|moving PORT[,PORT...] [THREADS] [SECONDS]
THREADS threads call at once, spread over one storage per port, on random
keys; it prints the calls per second and how many failed."""
import random
import sys
import threading
import time

from limits import parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

lib, ports = sys.argv[1], sys.argv[2].split(",")
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 8
secs = float(sys.argv[4]) if len(sys.argv) > 4 else 5
cls = FixedWindowRateLimiter if lib == "fixed" else MovingWindowRateLimiter
storages = [storage_from_string(f"redis://127.0.0.1:{p}") for p in ports]
limiters = [cls(s) for s in storages]
item = parse("100/minute")
counts, failed = [0] * threads, [0] * threads
end = time.time() + secs


def work(i):
    lim = limiters[i % len(limiters)]
    while time.time() < end:
        try:
            lim.hit(item, "b" + lib, str(random.randrange(10000)))
        except Exception as e:
            if not failed[i]:
                print(f"thread {i}: {e!r}", file=sys.stderr)
            failed[i] += 1
        counts[i] += 1


ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(f"{round(sum(counts) / secs)} calls/s, {sum(failed)} failed")
sys.exit(1 if sum(failed) else 0)
