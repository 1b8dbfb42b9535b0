"""Hosts a TCPStore server (`python store_host.py NOFILE_LIMIT`): prints {"port": ...}, then lowers
RLIMIT_NOFILE to NOFILE_LIMIT (0: leave it) so that accept() runs out of descriptors, and serves until stdin
closes. Warnings go to stderr, one line each, for the test to count."""

import json
import logging
import resource
import sys

from pycoll.rendezvous.store import TCPStore

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
limit = int(sys.argv[1])
store = TCPStore("127.0.0.1", 0, is_server=True, timeout=30.0)
print(json.dumps({"port": store.port}), flush=True)
if limit:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
sys.stdin.read()
store.close(linger=0)
