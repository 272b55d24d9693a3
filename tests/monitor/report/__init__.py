"""Helpers of the report tests: the simulated traffic, the command, a real headless Chromium
and a PNG reader small enough not to need PIL."""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np

from monitor.cli import _config, main
from monitor.report.cli import register

START = "2026-11-02T00:00:00Z"
INCIDENT = "revision_change:route=chat,at=3h,factor=0.7"
CHROMIUM_TIMEOUT_S = 90


def simulate(path: Path, *incidents: str, rate: float = 4) -> Path:
    """Six hours of the quiet scenario; chat's target revision changes at 3 h, acceptance
    x 0.7 (the draft drifts from the new target), plus ``incidents``."""
    args = ["simulate", "--scenario", "quiet", "--duration", "6h", "--rate", str(rate),
            "--seed", "3",
            "--start", START, "--out", str(path)]
    for incident in (INCIDENT, *incidents):
        args += ["--incident", incident]
    assert main(args) == 0
    return path


def replay(path: Path, url: str) -> None:
    assert main(["replay", str(path), "--db", url, "--migrate", "--no-progress"]) == 0


def report_parser() -> argparse.ArgumentParser:
    """A parser with ``report`` added by :func:`monitor.report.cli.register`, the way
    ``monitor.cli.build_parser`` adds its commands."""
    parser = argparse.ArgumentParser(prog="specwatch")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE")
        p.add_argument("--db", metavar="URL")

    register(sub, with_config, _config)
    return parser


def report_cli(argv: list[str]) -> int:
    """``specwatch report ...``; the exit code."""
    args = report_parser().parse_args(["report", *argv])
    return int(args.func(args))


def chromium_binary() -> str:
    path = shutil.which("chromium")
    assert path, "chromium is not installed: run scripts/system-packages (Debian: chromium)"
    return path


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page``; a profile of its own so parallel runs never share one."""
    cmd = [chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu",
           "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}", *args,
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc


# -- PNG -------------------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, the first one after the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _unfilter_slow(kind: int, line: bytes, prev: bytes, bpp: int) -> bytes:
    """Average (3) and Paeth (4) depend on the byte just decoded to their left: one by one."""
    out = bytearray(line)
    for i in range(len(out)):
        a = out[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            out[i] = (out[i] + ((a + b) >> 1)) & 0xFF
            continue
        c = prev[i - bpp] if i >= bpp else 0
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return bytes(out)


def png_pixels(data: bytes) -> np.ndarray:
    """The RGB pixels (height x width x 3) of an 8-bit RGB or RGBA non-interlaced PNG, which
    is what Chromium writes. None, Sub and Up rows are undone with numpy; only Average and
    Paeth rows need the byte loop."""
    width, height = png_size(data)
    depth, colour, _, _, interlace = data[24:29]
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    idat, pos = bytearray(), 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    stride = width * bpp
    raw = np.frombuffer(zlib.decompress(bytes(idat)), dtype=np.uint8)
    assert raw.size == height * (stride + 1), "truncated image data"
    raw = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind, line = int(raw[y, 0]), raw[y, 1:]
        if kind == 0:
            cur = line.copy()
        elif kind == 1:  # Sub: a running sum per channel
            cur = (np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint64) & 0xFF)
            cur = cur.astype(np.uint8).reshape(stride)
        elif kind == 2:  # Up
            cur = line + prev
        else:
            cur = np.frombuffer(_unfilter_slow(kind, line.tobytes(), prev.tobytes(), bpp),
                                dtype=np.uint8)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]


def colour_count(pixels: np.ndarray) -> int:
    """Distinct RGB colours (packed into one integer each: far faster than unique rows)."""
    p = pixels.astype(np.uint32)
    return len(np.unique((p[..., 0] << 16) | (p[..., 1] << 8) | p[..., 2]))
