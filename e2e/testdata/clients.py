# The client matrix for Python: redis-py (Debian's python3-redis) with its
# default options, against a sluice started by the Go test
# (e2e/matrix_test.go), which passes the address and credentials in the
# environment. Prints one line per check; exits 1 on the first failure.
import os
import sys

import redis

port = int(os.environ["SLUICE_PORT"])
name = "redis-py"


def check(what, ok, got=None):
    if not ok:
        print("FAIL %s: %s: got %r" % (name, what, got))
        sys.exit(1)
    print("ok %s: %s" % (name, what))


r = redis.Redis(host="127.0.0.1", port=port, password=os.environ["SLUICE_PASSWORD"])
check("AUTH with the password", r.execute_command("ACL", "WHOAMI") == b"default")
try:
    redis.Redis(host="127.0.0.1", port=port, password="wrong").ping()
    check("wrong password refused", False)
except redis.exceptions.ResponseError as e:  # AuthenticationError in newer redis-py
    check("wrong password refused", "WRONGPASS" in str(e), e)

user = os.environ["SLUICE_ACL_USER"]
c = redis.Redis(host="127.0.0.1", port=port, username=user, password=os.environ["SLUICE_ACL_PASS"], decode_responses=True)
check("ACL WHOAMI", c.execute_command("ACL", "WHOAMI") == user)
got = c.execute_command("RL.ACQUIRE", name + ":k", "RATE", 10, "BURST", 10)
check("inline RL.ACQUIRE", got == [1, 9, 10, 0, 100, name + ":k"], got)
got = c.execute_command("RL.ACQUIRE", "acme/api", "KEY", name)
check("budget RL.ACQUIRE", got == [1, 99, 100, 0, 600, "acme/api#" + name], got)
got = c.execute_command("CL.THROTTLE", name + ":cell", 15, 30, 60)
check("CL.THROTTLE", got == [0, 16, 15, -1, 2], got)

p = c.pipeline(transaction=False)
for _ in range(100):
    p.execute_command("RL.ACQUIRE", name + ":pipe", "RATE", 1, "PER", "hour", "BURST", 60)
got = p.execute()
check("100-call pipeline", len(got) == 100 and sum(1 for x in got if x[0] == 1) == 60, [x[0] for x in got])

# pipeline() is a transaction by default: MULTI … EXEC.
p = c.pipeline()
for _ in range(3):
    p.execute_command("RL.ACQUIRE", name + ":tx", "RATE", 2, "PER", "hour")
got = p.execute()
check("transaction", [x[0] for x in got] == [1, 1, 0] and got[2][:3] == [0, 0, 2], got)

try:
    c.execute_command("RL.ACQUIRE", name + ":k", "RATE", 0)
    check("error reply", False)
except redis.exceptions.ResponseError as e:
    check("error reply", str(e) == "RATE must be an integer between 1 and 1000000000000" or
          str(e) == "ERR RATE must be an integer between 1 and 1000000000000", str(e))

info = c.client_info()
check("client_info() parses (RESP2: redis-py 4 speaks no RESP3)", info["resp"] == "2" and info["tot-mem"] >= 0 and info["user"] == user, info)
