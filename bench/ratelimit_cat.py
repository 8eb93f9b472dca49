#!/usr/bin/env python3
"""Copy a file (or stdin) to stdout at no more than RATE megabytes per second.

    python bench/ratelimit_cat.py --rate 50 shard-000000.tar

Used by ``python -m ringloader.bench --dataset shards`` as a bandwidth-limited ``pipe:``
source: ``pipe:python bench/ratelimit_cat.py --rate 50 /data/shard-000000.tar``. The limit is
kept over the whole copy (bytes written <= rate x elapsed time, in 64 KiB chunks).
"""

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, required=True, help="megabytes (10^6) per second")
    parser.add_argument("path", nargs="?", default="-", help="file to copy (default stdin)")
    args = parser.parse_args()
    if args.rate <= 0:
        parser.error("--rate must be positive")
    rate = args.rate * 1e6
    source = sys.stdin.buffer if args.path == "-" else open(args.path, "rb")
    out = sys.stdout.buffer
    start = time.monotonic()
    sent = 0
    try:
        while True:
            chunk = source.read(1 << 16)
            if not chunk:
                break
            ahead = (sent + len(chunk)) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
            out.write(chunk)
            sent += len(chunk)
        out.flush()
    except BrokenPipeError:  # the reader stopped early: not an error of the copy
        # What is still buffered can never be written: point stdout at /dev/null, so the flush at
        # exit does not print "Exception ignored ... BrokenPipeError".
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
