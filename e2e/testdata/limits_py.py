"""Runs Python's limits (the engine of slowapi and Flask-Limiter), unchanged,
as its documentation uses it, against the server on SLUICE_PORT, and prints
what each call answered as one JSON line; with SLUICE_PORTS (three nodes),
three instances, one per node, share one limit of 50 and it prints how many
of 90 interleaved hits each strategy admitted.
e2e/redislibs_test.go compares the first against redis-server's."""
import json
import os
import time

from limits import parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter


def stats(limiter, item, *ids):
    # The reset is a whole second of the clock: say only that it is about
    # a minute away, so the instant between the two servers' calls does
    # not count.
    reset, remaining = limiter.get_window_stats(item, *ids)
    return [55 <= reset - time.time() <= 61, remaining]


def single(port):
    storage = storage_from_string(f"redis://127.0.0.1:{port}")
    out = []
    for name, cls in (("fixed", FixedWindowRateLimiter), ("moving", MovingWindowRateLimiter)):
        limiter = cls(storage)
        item = parse("5/minute")
        out.append([name, [limiter.hit(item, "ns", name) for _ in range(7)]])
        out.append([name + " stats", stats(limiter, item, "ns", name)])
        out.append([name + " test", limiter.test(item, "ns", name)])
        out.append([name + " cost 3", [limiter.hit(item, "ns", name + "3", cost=3) for _ in range(2)]])
        limiter.clear(item, "ns", name)
        out.append([name + " after clear", limiter.hit(item, "ns", name)])
    print(json.dumps(out))


def cluster(ports):
    counts = {}
    for name, cls in (("fixed", FixedWindowRateLimiter), ("moving", MovingWindowRateLimiter)):
        storages = [storage_from_string(f"redis://127.0.0.1:{p}") for p in ports]  # limiters hold them weakly
        limiters = [cls(st) for st in storages]
        item = parse("50/hour")
        admitted = 0
        for i in range(90):
            for attempt in range(200):
                try:
                    admitted += limiters[i % 3].hit(item, "shared", name)
                    break
                except Exception as e:  # an election: TRYAGAIN, ask again
                    if "TRYAGAIN" not in str(e) and "LOADING" not in str(e):
                        raise
                    time.sleep(0.02)
        counts[name] = admitted
    print(json.dumps(counts, sort_keys=True))


if os.environ.get("SLUICE_PORTS"):
    cluster(os.environ["SLUICE_PORTS"].split(","))
else:
    single(os.environ["SLUICE_PORT"])
