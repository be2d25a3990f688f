"""Cost of decoding room text files (``rooms/room.py``: :func:`decode_text`).

UTF-8 files take one strict ``bytes.decode`` (the replacement-free path every UTF-8 room
takes); other files go through charset-normalizer detection, plus the Windows-1252 check.
Prints, for a ``--kib`` KiB text (English contract prose with accented words) in UTF-8 and in
Windows-1252, the median wall and CPU seconds of ``--repeat`` decodes and the encoding found.

    python benchmarks/bench_decode.py --kib 1024 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlmdistill.hardware import machine_line
from rlmdistill.rooms.room import decode_text

PARAGRAPH = (
    "The Licensee shall pay the Licensor a royalty of 5 % of net sales. The Café and the "
    "Société Générale agree that the crème brûlée recipe, the naïve résumé and the déjà vu "
    "clause survive termination for two (2) years after the Effective Date.\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kib", type=int, default=1024, help="Text size in KiB.")
    parser.add_argument("--repeat", type=int, default=5, help="Decodes timed per encoding.")
    args = parser.parse_args()
    text = PARAGRAPH * max(1, args.kib * 1024 // len(PARAGRAPH))
    print(machine_line(), flush=True)  # the machine every figure below was measured on
    for codec in ("utf-8", "cp1252"):
        data = text.encode(codec)
        walls, cpus = [], []
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            out = decode_text(data)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        assert out.text == text, codec
        print(
            f"{codec:7s} {len(data) / 1024:8.0f} KiB -> {out.encoding:7s} replaced={out.replaced} "
            f"wall {statistics.median(walls):.4f} s  cpu {statistics.median(cpus):.4f} s"
        )


if __name__ == "__main__":
    main()
