"""Devices from Python: Runtime(devices=...), WEFT_DEVICES, rt.devices."""
import os

import pytest

import weft


def test_default_is_the_cpu():
    with weft.Runtime(workers=1) as rt:
        devs = rt.devices
    assert devs[0]["kind"] == "cpu" and devs[0]["index"] == 0 and devs[0]["name"] == "cpu"
    assert all(d["kind"] != "vgpu" for d in devs)


def test_virtual_gpus():
    with weft.Runtime(workers=2, devices="cpu,vgpu:3", vgpu_memory=1 << 20) as rt:
        devs = rt.devices
        assert rt.spawn(lambda: 42).result() == 42
    assert [d["name"] for d in devs] == ["cpu", "vgpu:0", "vgpu:1", "vgpu:2"]
    for i, d in enumerate(devs[1:]):
        assert d["kind"] == "vgpu" and d["index"] == i + 1 and d["ordinal"] == i
        assert d["memory"] == 1 << 20 and d["memory_used"] == 0


@pytest.mark.parametrize(
    "spec, named",
    [("cpu,gpu:2", "'gpu'"), ("vgpu:0", "vgpu:0"), ("cpu,cpu", "given twice"), ("cpu,,vgpu", "empty item"),
     ("cpu,cuda:63", "'cuda:63'")],
)
def test_bad_device_strings(spec, named):
    with pytest.raises(ValueError, match=named):
        weft.Runtime(workers=1, devices=spec)
    # the module stays usable
    with weft.Runtime(workers=1) as rt:
        assert rt.spawn(int, 7).result() == 7


def test_environment(monkeypatch):
    monkeypatch.setenv("WEFT_DEVICES", "cpu,vgpu:2")
    with weft.Runtime(workers=1) as rt:
        assert [d["kind"] for d in rt.devices] == ["cpu", "vgpu", "vgpu"]
    monkeypatch.setenv("WEFT_DEVICES", "cpu,nonsense")
    with pytest.raises(ValueError, match="'nonsense'"):
        weft.Runtime(workers=1)
    # the keyword wins over the environment
    with weft.Runtime(workers=1, devices="cpu") as rt:
        assert len(rt.devices) == 1


def test_closed_runtime_has_no_devices():
    rt = weft.Runtime(workers=1)
    rt.close()
    with pytest.raises(RuntimeError, match="closed"):
        rt.devices
