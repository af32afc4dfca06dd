"""Device-resident inputs and outputs (IOBinding / OrtValue / DeviceTensor) on gles3, gles31 and
vulkan: results equal a plain run, a tensor fed back stays on the device (RunStats counts no
upload or download), a caller's GL texture goes in and a texture comes out."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.device_tensor import DeviceTensor
from gpubackend.errors import GpuBackendError, InputError

RESIDENT_PATHS = ("gles3", "gles31", "vulkan")


def _model(channels_out: int = 4, size: int = 8):
    """y = Relu(Conv(x)) + Conv(x): (1, 3, S, S) -> (1, channels_out, S, S); same shape in and
    out when channels_out == 3, so an output can be fed back as the next run's input."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((channels_out, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels_out, size, size])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def probe_report():
    return gpubackend.probe()


def _session(path: str, probe_report, model, precision: str = "fp32") -> gpubackend.Session:
    if not probe_report.usable(path):
        pytest.skip(f"the probe did not verify {path} here: {probe_report.paths[path].reason}")
    return gpubackend.Session(model, path=path, precision=precision, fallback=False)


def _err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.mark.parametrize("path", RESIDENT_PATHS)
def test_output_fed_back_never_leaves_the_device(path: str, probe_report) -> None:
    model = _model(channels_out=3)
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    sess = _session(path, probe_report, model)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (y,) = sess.run_resident({"x": x}, device_outputs={"y": None})
    assert isinstance(y, DeviceTensor) and y.path == path and y.shape == (1, 3, 8, 8)
    assert sess.stats.uploads == 1 and sess.stats.downloads == 0
    want = ref.run({"x": x})[0]
    assert _err(y.numpy(), want) < 1e-4
    # the output goes back in as the next input, and the next output is written into the same tensor
    chained = want
    z = y
    for _ in range(3):
        (z2,) = sess.run_resident({"x": z}, device_outputs={"y": y if z is not y else None})
        assert sess.stats.uploads == 0 and sess.stats.downloads == 0, sess.stats.as_dict()
        chained = ref.run({"x": chained})[0]
        assert _err(z2.numpy(), chained) < 1e-4
        z = z2
    # a plain run with a device feed downloads only the result
    (h,) = sess.run({"x": z})
    assert sess.stats.uploads == 0 and sess.stats.downloads >= 1
    assert _err(h, ref.run({"x": z.numpy()})[0]) < 1e-4
    sess.close()


@pytest.mark.parametrize("path", RESIDENT_PATHS)
def test_iobinding_like_onnxruntime(path: str, probe_report) -> None:
    model = _model()
    if not probe_report.usable(path):
        pytest.skip(f"the probe did not verify {path} here")
    provider = gpubackend.onnxruntime_api.PROVIDER_OF_PATH[path]
    sess = gpubackend.InferenceSession(model.SerializeToString(), providers=[provider])
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    rng = np.random.default_rng(1)
    binding = sess.io_binding()
    binding.bind_output("y", "gpu")
    outputs = []
    for _ in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        binding.bind_cpu_input("x", x)
        sess.run_with_iobinding(binding)
        (value,) = binding.get_outputs()
        assert value.device_name() == path and value.shape() == [1, 4, 8, 8] and value.data_type() == "tensor(float)"
        assert sess.session.stats.downloads == 0
        outputs.append(value.device_tensor)
        (host,) = binding.copy_outputs_to_cpu()
        assert _err(host, ref.run({"x": x})[0]) < 1e-4
    assert outputs[0] is outputs[1] is outputs[2]  # the bound output is written again, as onnxruntime's is
    binding.clear_binding_outputs()
    binding.bind_output("y")  # on the CPU
    sess.run_with_iobinding(binding)
    assert binding.get_outputs()[0].device_name() == "cpu"
    with pytest.raises(GpuBackendError, match="raw device pointer"):
        binding.bind_input("x", "cuda", 0, np.float32, [1, 3, 8, 8], 1234)
    with pytest.raises(GpuBackendError):
        gpubackend.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32), "cuda")
    sess.close()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("path", ["gles3", "gles31"])
def test_gl_texture_in_and_out(path: str, precision: str, probe_report) -> None:
    """A caller's RGBA8 texture is the input (no upload), and a 1-channel output comes back as a
    texture of the session's context holding the mask in its red component (no download)."""
    model = _model(channels_out=1, size=16)
    if not probe_report.usable(path):
        pytest.skip(f"the probe did not verify {path} here")
    ort_sess = gpubackend.InferenceSession(model, gpubackend.SessionOptions(precision=precision, fallback=False),
                                           providers=[gpubackend.onnxruntime_api.PROVIDER_OF_PATH[path]])
    sess = ort_sess.session
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    rgba = np.random.default_rng(2).integers(0, 256, (16, 16, 4), dtype=np.uint8)
    texture = sess.on_device(lambda: sess.gl_context().texture((16, 16), 4, rgba.tobytes()))
    binding = ort_sess
    io = binding.io_binding()
    io.bind_gl_texture_input("x", texture)
    io.bind_output("y", "gpu")
    binding.run_with_iobinding(io)
    assert sess.stats.uploads == 0 and sess.stats.downloads == 0, sess.stats.as_dict()
    (out,) = io.get_outputs()
    x = (rgba[:, :, :3].astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
    want = ref.run({"x": x})[0]
    tol = 1e-2 if precision == "fp16" else 1e-4
    assert _err(out.numpy(), want) < tol

    def read_texture() -> np.ndarray:
        tex = out.texture()
        assert tex.size == (16, 16) and tex.ctx is sess.gl_context()
        fbo = tex.ctx.framebuffer(color_attachments=[tex])
        data = np.frombuffer(fbo.read(components=4, dtype="f4"), np.float32).reshape(16, 16, 4)
        fbo.release()
        return data

    texel = sess.on_device(read_texture)
    assert _err(texel[:, :, 0], want[0, 0]) < tol
    assert np.all(texel[:, :, 1:3] == 0)
    sess.on_device(texture.release)
    sess.close()


def test_device_tensor_errors(probe_report) -> None:
    model = _model()
    sess = _session("gles3", probe_report, model)
    (y,) = sess.run_resident({"x": np.zeros((1, 3, 8, 8), np.float32)}, device_outputs={"y": None})
    with pytest.raises(InputError, match="expects"):
        sess.run({"x": y})  # (1, 4, 8, 8) where (1, 3, 8, 8) is declared
    texture = sess.on_device(lambda: sess.gl_context().texture((4, 4), 4))
    with pytest.raises(InputError, match="texture is 4x4"):
        sess.tensor_from_gl_texture(texture, "x")
    y.close()
    y.close()  # twice is fine
    with pytest.raises(InputError, match="closed"):
        sess.run({"x": y})
    sess.on_device(texture.release)
    sess.close()


def test_cpu_session_takes_device_tensors_through_the_host(probe_report) -> None:
    """A device tensor fed to a CPU session is downloaded (and counted) once."""
    model = _model(channels_out=3)
    gpu = _session("gles31", probe_report, model)
    cpu = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (y,) = gpu.run_resident({"x": x}, device_outputs={"y": None})
    (z,) = cpu.run({"x": y})
    assert cpu.stats.downloads == 1
    assert _err(z, cpu.run({"x": cpu.run({"x": x})[0]})[0]) < 1e-4
    gpu.close()
