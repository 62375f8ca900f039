"""Data sets built for the benchmarks (no download needed).

``digit_images`` is the "larger image-like set" of the acceptance targets:
sklearn's digits (1,797 rows of 8 x 8) is small, and the MNIST that
``_mnist.py`` loads is 10,000 digits, about 1,000 of each. Each row is a
20 x 20 image (d = 400) of a digit from sklearn's set, upscaled to
18 x 18, rotated by up to ±10°, placed at a random offset of up to 2
pixels and given pixel noise: 10,000 rows make it about the size and shape
of a small image benchmark, with the translations and rotations that
make pixel distances imperfect.
"""

import numpy as np
from scipy import ndimage
from sklearn.datasets import load_digits


def digit_images(n=10_000, *, size=20, seed=0):
    """(X, y): n augmented digit images of size x size pixels, labels 0-9."""
    rng = np.random.RandomState(seed)
    base, target = load_digits(return_X_y=True)
    idx = rng.randint(len(base), size=n)
    inner = size - 2
    out = np.zeros((n, size, size))
    for row, i in enumerate(idx):
        img = ndimage.zoom(base[i].reshape(8, 8) / 16.0, inner / 8, order=1)
        img = ndimage.rotate(img, rng.uniform(-10, 10), reshape=False, order=1)
        dx, dy = rng.randint(0, size - inner + 1, size=2)
        out[row, dy : dy + inner, dx : dx + inner] = img
    out += 0.05 * rng.standard_normal(out.shape)
    return out.reshape(n, -1), target[idx]
