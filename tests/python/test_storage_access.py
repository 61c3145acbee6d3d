"""Storage-level access to ember tensors (issue 4): metadata works, byte access raises
a clear RuntimeError naming the tensor-level path; nothing crashes and the tensor stays
readable afterwards."""

import copy
import pickle

import pytest
import torch

from conftest import DEV

BYTE_ACCESS = {
    "cpu": lambda s: s.cpu(),
    "tolist": lambda s: s.tolist(),
    "getitem": lambda s: s[0],
    "setitem": lambda s: s.__setitem__(0, 1),
    "iter": lambda s: list(iter(s)),
    "copy_": lambda s: s.copy_(torch.zeros(6).untyped_storage()),
    "data_ptr": lambda s: s.data_ptr(),
    "clone": lambda s: s.clone(),
    "deepcopy": lambda s: copy.deepcopy(s),
    "pickle": lambda s: pickle.dumps(s),
    "fill_": lambda s: s.fill_(0),
    "to": lambda s: s.to("cpu"),
}


@pytest.mark.parametrize("name", list(BYTE_ACCESS))
def test_untyped_storage_byte_access_raises_clearly(name):
    t = torch.arange(6.0).to(DEV) * 2
    s = t.untyped_storage()
    with pytest.raises(
        RuntimeError, match=r"ember: .* not supported for ember tensors.*t\.cpu\(\)"
    ):
        BYTE_ACCESS[name](s)
    torch.testing.assert_close(t.cpu(), torch.arange(6.0) * 2)


def test_storage_metadata_and_typed_storage():
    t = torch.arange(6.0).to(DEV)
    s = t.untyped_storage()
    assert s.device.type == "ember" and s.nbytes() == 24
    with pytest.raises(RuntimeError, match="Tensor.storage"):
        t.storage()
    # the supported path: a CPU copy's storage
    assert t.cpu().untyped_storage().tolist()[:4] == list(
        torch.arange(6.0).untyped_storage().tolist()[:4]
    )
    # CPU storages are untouched by the guard
    c = torch.arange(3.0)
    assert c.untyped_storage().cpu().nbytes() == 12 and len(c.storage()) == 3
