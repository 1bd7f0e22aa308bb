"""Options of a user data file that do not apply to it are refused, not ignored (issue 45,
smaller item: ``--data-kwargs '{"target": ...}'`` was ignored for an .npz)."""

import numpy as np
import pytest

from bdlkit import data
from bdlkit.core.errors import InputError


def test_a_target_column_is_refused_for_an_npz(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.zeros((10, 2), np.float32), y=np.arange(10) % 2)
    with pytest.raises(InputError, match=r"d\.npz: target='label' names a \.csv file's target "
                                         r"column.*arrays y.*drop target"):
        data.load(str(path), target="label")
    assert data.load(str(path)).num_train == 8  # without it the file loads


def test_a_target_column_still_selects_a_csv_column(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("a,label,b\n" + "".join(f"{i},{i % 2},{i * 0.5}\n" for i in range(10)))
    ds = data.load(str(path), target="label", task="classification")
    assert ds.x_train.shape[1] == 2 and set(ds.y_train.tolist()) <= {0, 1}
