"""The sample corpus of the e2e tests: the fortunes of a directory (Debian's `fortunes`), each
a document, in file-name order ('.dat' indexes and '.u8' copies skipped)."""
import os


def fortunes(root):
    docs = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and not name.endswith((".dat", ".u8")):
            text = open(path, encoding="utf-8", errors="replace").read()
            docs += [d.strip() for d in text.split("\n%\n") if d.strip()]
    return docs
