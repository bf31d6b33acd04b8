#!/usr/bin/env python3
"""Line plot of a few curves as a PNG, with the standard library only (the VMs have no
matplotlib): axes, grid lines at round values with tick labels in a small bitmap font, one
colour per curve, and a dashed horizontal line where asked. Used by the bench scripts that plot.

Usage: plot_curves_png.py SPEC.json OUT.png
SPEC: {"x_label": "...", "y_label": "...", "hline": y or null,
       "series": [{"name": "...", "color": [r, g, b], "points": [[x, y], ...]}, ...]}
The labels and the series names are drawn in the font below (digits, upper-case letters and a
few signs; lower case is drawn as upper case).
"""
import json
import math
import struct
import sys
import zlib

# 3x5 glyphs, rows top to bottom, 3 bits each (4 = left column).
FONT = {
    "0": [7, 5, 5, 5, 7], "1": [2, 6, 2, 2, 7], "2": [7, 1, 7, 4, 7], "3": [7, 1, 7, 1, 7],
    "4": [5, 5, 7, 1, 1], "5": [7, 4, 7, 1, 7], "6": [7, 4, 7, 5, 7], "7": [7, 1, 1, 1, 1],
    "8": [7, 5, 7, 5, 7], "9": [7, 5, 7, 1, 7], ".": [0, 0, 0, 0, 2], "-": [0, 0, 7, 0, 0],
    " ": [0, 0, 0, 0, 0], "(": [2, 4, 4, 4, 2], ")": [2, 1, 1, 1, 2], "/": [1, 1, 2, 4, 4],
    "=": [0, 7, 0, 7, 0], ",": [0, 0, 0, 2, 4], "+": [0, 2, 7, 2, 0], "x": [0, 5, 2, 5, 0],
    "A": [2, 5, 7, 5, 5], "B": [6, 5, 6, 5, 6], "C": [7, 4, 4, 4, 7], "D": [6, 5, 5, 5, 6],
    "E": [7, 4, 6, 4, 7], "F": [7, 4, 6, 4, 4], "G": [7, 4, 5, 5, 7], "H": [5, 5, 7, 5, 5],
    "I": [7, 2, 2, 2, 7], "J": [1, 1, 1, 5, 7], "K": [5, 5, 6, 5, 5], "L": [4, 4, 4, 4, 7],
    "M": [5, 7, 7, 5, 5], "N": [6, 5, 5, 5, 5], "O": [7, 5, 5, 5, 7], "P": [7, 5, 7, 4, 4],
    "Q": [7, 5, 5, 7, 1], "R": [7, 5, 6, 5, 5], "S": [7, 4, 7, 1, 7], "T": [7, 2, 2, 2, 2],
    "U": [5, 5, 5, 5, 7], "V": [5, 5, 5, 5, 2], "W": [5, 5, 7, 7, 5], "X": [5, 5, 2, 5, 5],
    "Y": [5, 5, 2, 2, 2], "Z": [7, 1, 2, 4, 7], "_": [0, 0, 0, 0, 7], ":": [0, 2, 0, 2, 0],
}
W, H = 900, 560
LEFT, RIGHT, TOP, BOTTOM = 90, 30, 30, 70
SCALE = 2  # font pixels per glyph pixel


class Canvas:
    def __init__(self):
        self.px = bytearray(b"\xff" * (W * H * 3))

    def set(self, x, y, c):
        if 0 <= x < W and 0 <= y < H:
            i = (y * W + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1, dash=0):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(n + 1):
            if dash and (k // dash) % 2:
                continue
            x = round(x0 + (x1 - x0) * k / n)
            y = round(y0 + (y1 - y0) * k / n)
            for dx in range(width):
                for dy in range(width):
                    self.set(x + dx - width // 2, y + dy - width // 2, c)

    def text(self, x, y, s, c=(0, 0, 0)):
        for ch in s.upper():
            rows = FONT.get(ch, FONT[" "])
            for r, bits in enumerate(rows):
                for col in range(3):
                    if bits & (4 >> col):
                        for a in range(SCALE):
                            for b in range(SCALE):
                                self.set(x + col * SCALE + a, y + r * SCALE + b, c)
            x += 4 * SCALE

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * W * 3:(y + 1) * W * 3]) for y in range(H))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(chunk(b"IEND", b""))


def nice_ticks(lo, hi, count=6):
    step = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(step))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= step), default=10 * mag)
    first = math.ceil(lo / step) * step
    ticks, t = [], first
    while t <= hi + 1e-12:
        ticks.append(t)
        t += step
    return ticks


def label(v):
    return ("%.3g" % v) if abs(v) < 1e4 else ("%.1e" % v).replace("e+0", "e").replace("e+", "e")


def main():
    spec = json.load(open(sys.argv[1]))
    xs = [p[0] for s in spec["series"] for p in s["points"]]
    ys = [p[1] for s in spec["series"] for p in s["points"]]
    if spec.get("hline") is not None:
        ys.append(spec["hline"])
    x0, x1 = 0.0, max(xs)
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.05 or 1
    y0, y1 = y0 - pad, y1 + pad
    cv = Canvas()
    px = lambda x: LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)
    py = lambda y: H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM)
    grey = (220, 220, 220)
    for t in nice_ticks(x0, x1):
        cv.line(round(px(t)), TOP, round(px(t)), H - BOTTOM, grey)
        cv.text(round(px(t)) - 12, H - BOTTOM + 8, label(t))
    for t in nice_ticks(y0, y1):
        cv.line(LEFT, round(py(t)), W - RIGHT, round(py(t)), grey)
        cv.text(8, round(py(t)) - 5, label(t))
    cv.line(LEFT, TOP, LEFT, H - BOTTOM, (0, 0, 0))
    cv.line(LEFT, H - BOTTOM, W - RIGHT, H - BOTTOM, (0, 0, 0))
    cv.text(LEFT, H - 30, spec.get("x_label", ""))
    cv.text(8, 10, spec.get("y_label", ""))
    if spec.get("hline") is not None:
        y = round(py(spec["hline"]))
        cv.line(LEFT, y, W - RIGHT, y, (120, 120, 120), dash=6)
    for i, s in enumerate(spec["series"]):
        c = tuple(s["color"])
        pts = [(round(px(x)), round(py(y))) for x, y in s["points"]]
        for a, b in zip(pts, pts[1:]):
            cv.line(a[0], a[1], b[0], b[1], c, width=2)
        lx, ly = W - RIGHT - 330, TOP + 10 + 18 * i
        cv.line(lx, ly + 5, lx + 24, ly + 5, c, width=3)
        cv.text(lx + 32, ly, s["name"], c)
    cv.png(sys.argv[2])


if __name__ == "__main__":
    main()
