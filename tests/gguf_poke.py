#!/usr/bin/env python3
"""Rewrites values inside a GGUF copy, for tests that need a broken model.

    gguf_poke.py IN OUT tensor NAME VALUE    every element of f32 tensor NAME := VALUE
    gguf_poke.py IN OUT f32 KEY VALUE        f32 metadata KEY := VALUE
    gguf_poke.py IN OUT str KEY VALUE        string metadata KEY := VALUE, padded with
                                             spaces to the old length (no longer than it)
    gguf_poke.py IN OUT key KEY NEWKEY       renames metadata KEY (NEWKEY of the same length)

VALUE is a Python float literal ("nan", "inf", "-1", "1.4e-45") for f32. The
file's layout is unchanged: only those bytes differ."""
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_F32, GGUF_STRING, GGUF_ARRAY, TYPE_F32 = 6, 8, 9, 0


class Reader:
    def __init__(self, buf):
        self.buf, self.off = buf, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.buf, self.off)
        self.off += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.buf[self.off:self.off + n].decode()
        self.off += n
        return s

    def skip_value(self, t):
        if t == GGUF_STRING:
            self.string()
        elif t == GGUF_ARRAY:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.skip_value(et)
        else:
            self.off += SCALAR[t]


def main():
    src, dst, what, name, value = sys.argv[1:6]
    buf = bytearray(open(src, "rb").read())
    r = Reader(buf)
    if r.take("I") != 0x46554747:
        sys.exit("not a GGUF file")
    r.take("I")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    align, done = 32, False
    for _ in range(n_kv):
        key_at = r.off
        key, t = r.string(), r.take("I")
        if what == "key" and key == name:
            if len(value.encode()) != len(key.encode()):
                sys.exit(f"{value} is not as long as {key}")
            buf[key_at + 8:key_at + 8 + len(key.encode())] = value.encode()
            done = True
        if what == "str" and key == name:
            if t != GGUF_STRING:
                sys.exit(f"{key} is not a string")
            n = struct.unpack_from("<Q", buf, r.off)[0]
            v = value.encode()
            if len(v) > n:
                sys.exit(f"{value!r} is longer than the {n} bytes of {key}")
            buf[r.off + 8:r.off + 8 + n] = v + b" " * (n - len(v))
            done = True
        if what == "f32" and key == name:
            if t != GGUF_F32:
                sys.exit(f"{key} is not an f32")
            struct.pack_into("<f", buf, r.off, float(value))
            done = True
        if key == "general.alignment":
            align = struct.unpack_from("<I", buf, r.off)[0]
        r.skip_value(t)
    tensors = []
    for _ in range(n_tensors):
        tname, nd = r.string(), r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        ttype, off = r.take("I"), r.take("Q")
        tensors.append((tname, ne, ttype, off))
    data = (r.off + align - 1) // align * align
    for tname, ne, ttype, off in tensors:
        if what == "tensor" and tname == name:
            if ttype != TYPE_F32:
                sys.exit(f"{tname} is not f32")
            count = 1
            for d in ne:
                count *= d
            struct.pack_into(f"<{count}f", buf, data + off, *([float(value)] * count))
            done = True
    if not done:
        sys.exit(f"{what} {name} not found")
    open(dst, "wb").write(buf)


main()
