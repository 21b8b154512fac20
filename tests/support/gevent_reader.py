"""A Locust worker's reader in a process of its own, monkey-patched by gevent as Locust does.

``python -m tests.support.gevent_reader URL KERNEL [refused]`` sends one streamed request to
``URL`` through loadgen.drivers.locust.raw (KERNEL: 1 asks for kernel stamps, 0 for user-space
ones; ``refused``: the kernel refuses the socket option) and, after every read of a piece that
tests.support.chunk_server marked, blocks gevent's whole hub: it prints ``paused``, waits for
``sent`` on stdin (a real read: stdin is not patched) and sleeps ``BLOCK_S`` with the real
``time.sleep``, as a greenlet that hogs the CPU in a Locust worker would. Last it prints
``result`` and a JSON object: each chunk's recorded and user-space read times (perf_counter_ns,
one clock for every process of the machine), the stamp source, the error, the worker's stamp
report and the module of the socket class that read.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402  (after the patch, as in a Locust worker)
import sys  # noqa: E402
from typing import Any  # noqa: E402

from loadgen.client.readers.openai_stream import StreamAccumulator  # noqa: E402
from loadgen.client.transport import kernel_stamps  # noqa: E402
from loadgen.drivers.driver import ClientConfig  # noqa: E402
from loadgen.drivers.locust.raw import UserConnections, WorkerStamps  # noqa: E402
from tests.support.chunk_server import BLOCK_S, CHUNKS, HOLD_MARK  # noqa: E402

real_sleep = monkey.get_original("time", "sleep")


def main() -> int:
    url, kernel, refused = sys.argv[1], sys.argv[2] == "1", "refused" in sys.argv[3:]
    if refused:
        kernel_stamps._SO_TIMESTAMPNS = 0x7FFF  # no such socket option
    config = ClientConfig(url, "m", timeout_s=10, kernel_stamps=kernel)
    stamps = WorkerStamps(config)
    user = UserConnections(config, stamps)
    conn = user.conns[0]
    seen: dict[str, Any] = {}
    received = conn.parser.stamped_received

    def held(data: bytes, t_ns: int, read_ns: int) -> None:
        seen["socket"] = type(conn.get_extra_info("socket")).__module__
        received(data, t_ns, read_ns)
        if HOLD_MARK in data.lower():
            print("paused", flush=True)
            sys.stdin.readline()
            real_sleep(BLOCK_S)  # the whole hub stops: no greenlet reads

    conn.parser.stamped_received = held
    acc = StreamAccumulator("completions", CHUNKS)
    body = json.dumps({"model": "m", "prompt": "x", "stream": True}).encode()
    _, error, source = user.stream(0, "completions", body, acc, url + "/v1/completions")
    user.close()
    result = {
        "chunk_ns": acc.times_ns, "read_ns": acc.read_ns, "stamps": source, "error": error,
        "reports": stamps.reports(0), "socket": seen.get("socket"),
    }  # fmt: skip
    print("result " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
