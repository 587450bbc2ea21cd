"""The probes' synthetic data (bench/capacity/data.py).

    python -m pytest tests/unit/capacity/test_data.py -q
"""

import numpy as np

from bench.capacity import data


def test_a_smaller_vocabulary_rewrites_the_tokens(tmp_path):
    data.prepare(tmp_path, 4096, 1 << 12)
    bin_dir = data.prepare(tmp_path, 512, 1 << 12)  # a sweep resumed with --vocab-size 512
    for split in ("train", "val"):
        assert np.fromfile(bin_dir / f"{split}.bin", np.uint16).max() < 512
