# The native event scanner (_scan.c); see ddpprof/trace/scanned.py.

def scan(
    run: bytes | bytearray | memoryview, /
) -> tuple[int, tuple[bytes, ...], list[bytes], list[bytes], list[bytes], list[bytes]] | None: ...
