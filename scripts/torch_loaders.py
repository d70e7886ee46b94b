"""Which zip layout torch's loaders take, and which CRC-32 they read (issue 45 item 2).

Usage: python scripts/torch_loaders.py FILE.pt ... [--model-folder DIR] ...

1. torch.save's own layout: each record's general-purpose flags and the CRC-32 in its local header
   (torch's writer streams: bit 3 set, CRC and sizes in a data descriptor after the data).
2. For every FILE (a torch file written by ckpt-surgery): the same flags, then torch.load with and
   without mmap=True, with weights_only=True and False; every way must give the same tensors.
3. For every --model-folder (a model folder with pytorch_model.bin): transformers'
   AutoModel.from_pretrained, and its embedding against torch.load of the .bin.
   python's zipfile.testzip checks every record's CRC-32 (torch's loaders do not: see 4).
4. Which CRC-32 torch checks: a copy of the first FILE with the descriptor's CRC of one storage
   record flipped, and one with the central directory's flipped, each loaded every way.
Exit 1 when a load that should work fails or the tensors differ.
"""

import io
import os
import shutil
import struct
import sys
import tempfile
import zipfile

import torch


def local_headers(path):
    """(name, flags, crc in local header, data offset, size) of every record, from the central
    directory (zipfile) and each local header read at its offset."""
    out = []
    with open(path, "rb") as f, zipfile.ZipFile(path) as z:
        for info in z.infolist():
            f.seek(info.header_offset)
            h = f.read(30)
            sig, _, flags, _, _, _, crc, _, _, n, m = struct.unpack("<IHHHHHIIIHH", h)
            assert sig == 0x04034B50, "not a local header"
            out.append((info.filename, flags, crc, info.header_offset + 30 + n + m, info))
    return out


def describe(path, what):
    recs = local_headers(path)
    bit3 = sum(1 for _, fl, _, _, i in recs if fl & 8)
    zero = sum(1 for _, _, c, _, i in recs if c == 0 and i.file_size)
    aligned = sum(1 for _, _, _, d, i in recs if d % 64 == 0)
    print(f"{what}: {len(recs)} records, bit 3 (data descriptor) on {bit3}, CRC 0 in the local "
          f"header of {zero} non-empty, data 64-byte aligned {aligned}/{len(recs)}")


def loads(path):
    """Every way torch.load reads a file: {way: state or the error}."""
    out = {}
    for wo in (True, False):
        for mm in (False, True):
            way = f"torch.load(weights_only={wo}, mmap={mm})"
            try:
                out[way] = torch.load(path, map_location="cpu", weights_only=wo, mmap=mm)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                out[way] = e
    return out


def flat(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flat(v, f"{prefix}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flat(v, f"{prefix}.{i}")


def same(a, b):
    fa, fb = dict(flat(a)), dict(flat(b))
    return fa.keys() == fb.keys() and all(
        fa[k].dtype == fb[k].dtype and torch.equal(fa[k], fb[k]) for k in fa
    )


def check_file(path):
    describe(path, path)
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()  # every record's bytes against the central directory's CRC-32
    print(f"  python zipfile.testzip (CRC-32 of every record): {'OK' if bad is None else 'BAD ' + bad}")
    ok = bad is None
    got = loads(path)
    ref = None
    for way, v in got.items():
        if isinstance(v, Exception):
            if "weights_only=True" in way and "Unsupported global" in str(v):
                print(f"  {way}: refused a global (the file needs weights_only=False): {str(v)[:80]}")
                continue
            print(f"  {way}: FAILED {type(v).__name__}: {str(v)[:200]}")
            ok = False
            continue
        if ref is None:
            ref = v
        eq = same(ref, v)
        ok &= eq
        print(f"  {way}: loaded, {len(dict(flat(v)))} tensors, same as the first: {eq}")
    return ok


def flipped(path, where, record, tmp):
    """A copy of `path` with the CRC-32 of its record ending in `record` flipped in the
    descriptor ("descriptor") or in the central directory ("directory")."""
    dst = os.path.join(tmp, f"{where}{record.replace('/', '_')}.pt")
    shutil.copy(path, dst)
    name, _, _, data, info = next(r for r in local_headers(path) if r[0].endswith(record) and r[4].file_size)
    with open(dst, "r+b") as f:
        if where == "descriptor":
            f.seek(data + info.file_size)
            sig, crc = struct.unpack("<II", f.read(8))
            assert sig == 0x08074B50
            f.seek(data + info.file_size + 4)
            f.write(struct.pack("<I", crc ^ 1))
        else:
            blob = f.read()
            i = blob.find(b"PK\x01\x02")
            while i >= 0:
                n = struct.unpack("<H", blob[i + 28:i + 30])[0]
                if blob[i + 46:i + 46 + n].decode() == name:
                    break
                i = blob.find(b"PK\x01\x02", i + 4)
            (crc,) = struct.unpack("<I", blob[i + 16:i + 20])
            f.seek(i + 16)
            f.write(struct.pack("<I", crc ^ 1))
    return dst, name


def crc_checks(path):
    with tempfile.TemporaryDirectory() as tmp:
        for where, record in [(w, r) for r in ("/data/0", "/data.pkl") for w in ("descriptor", "directory")]:
            dst, name = flipped(path, where, record, tmp)
            print(f"{os.path.basename(path)} with the CRC-32 of {name} flipped in the {where}:")
            for way, v in loads(dst).items():
                res = f"FAILED {type(v).__name__}: {str(v)[:100]}" if isinstance(v, Exception) else "loaded"
                print(f"  {way}: {res}")


def check_folder(folder):
    import transformers

    ok = True
    try:
        m = transformers.AutoModel.from_pretrained(folder)
        bin_state = torch.load(os.path.join(folder, "pytorch_model.bin"), weights_only=True, mmap=True)
        emb = m.get_input_embeddings().weight.detach()
        key = next(k for k, v in bin_state.items() if v.shape == emb.shape and k.endswith("word_embeddings.weight"))
        eq = torch.equal(emb, bin_state[key])
        ok &= eq
        print(f"transformers {transformers.__version__} AutoModel.from_pretrained({folder}): loaded "
              f"{type(m).__name__}, embedding {tuple(emb.shape)} equal to the file's: {eq}")
    except Exception as e:  # noqa: BLE001
        print(f"transformers from_pretrained({folder}): FAILED {type(e).__name__}: {e}")
        ok = False
    return ok


def main(argv):
    files, folders = [], []
    it = iter(argv)
    for a in it:
        (folders if a == "--model-folder" else files).append(next(it) if a == "--model-folder" else a)
    print(f"torch {torch.__version__}")
    buf = io.BytesIO()
    torch.save({"w": torch.arange(10.0), "b": torch.zeros(0)}, buf)
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "torch_saved.pt")
        with open(p, "wb") as f:
            f.write(buf.getvalue())
        describe(p, "torch.save's own file")
    ok = all([check_file(f) for f in files])
    ok &= all([check_folder(d) for d in folders])
    if files:
        crc_checks(files[0])
    print("all loaders: OK" if ok else "all loaders: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
