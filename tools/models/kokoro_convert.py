"""Convert the Kokoro-82M int8 ONNX export back to float weights with PyTorch key names.

MLX Kokoro loaders (kokoro-mlx) read the layout of the original checkpoint: one safetensors
file keyed like ``decoder.generator.ups.0.weight_v``. The int8 export keeps enough to rebuild it:

* quantised weights (``MatMulInteger``, ``ConvInteger``, ``Gather``, ``DynamicQuantizeLSTM``) are
  dequantised with the scale and zero point their node uses;
* weights without a module name (``onnx::MatMul_6547``, ``/decoder/decoder/encode/Mul_output_0``)
  are named after the node that consumes them, whose name carries the module path;
* weight-normalised convolutions were folded by the exporter (``g * v / ||v||``); they are split
  again into ``weight_g`` (the norm) and ``weight_v``. Some output channels quantised to all
  zeros: their norm is 0 and ``v / ||v||`` would be 0/0 = NaN in the loader, so those rows get a
  unit ``weight_v`` and ``weight_g = 0``, which rebuilds the same zero weight without a NaN;
* ONNX LSTM gates are ordered i, o, f, c; PyTorch (and MLX) use i, f, g, o.

Only numpy and onnx are needed: no torch, no MLX.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

_ONNX_TO_TORCH_GATES = (0, 2, 3, 1)  # ONNX i,o,f,c -> PyTorch i,f,g(c),o
_PREDICTOR_TOP = re.compile(r"^(F0|N)(\.\d+)?$|^(F0_proj|N_proj|shared)$")
_NOT_WEIGHTS = ("decoder.generator.stft.",)  # iSTFT bases are recomputed by every runtime


def _module_from_node(node_name: str) -> str:
    """'/decoder/decoder/decode.0/conv1x1/Conv_quant' -> 'decoder.decode.0.conv1x1'."""
    parts = [re.sub(r"_\d+$", "", p) for p in node_name.strip("/").split("/")[:-1]]
    if parts[:2] == ["decoder", "decoder"]:
        parts = ["decoder", *parts[2:]]
    elif parts[:1] == ["encoder"]:
        parts = parts[1:]
        if parts and _PREDICTOR_TOP.match(parts[0]):
            parts = ["predictor", *parts]
    merged: list[str] = []
    for part in parts:  # '/cnn.0/cnn.0.0/' and '/asr_res/asr_res.0/' name one module
        if merged and part.startswith(merged[-1] + "."):
            merged[-1] = part
        else:
            merged.append(part)
    return ".".join(merged)


def _torch_name(initializer: str) -> str:
    """'decoder.decoder.encode.conv1.bias' -> 'decoder.encode.conv1.bias'."""
    name = initializer.removesuffix("_quantized")
    if name.startswith("decoder.decoder."):
        return "decoder." + name[len("decoder.decoder."):]
    return name.removeprefix("encoder.")


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int = -1) -> np.ndarray:
    """(q - zero) * scale with per-tensor or per-channel (along `axis`) parameters."""
    q = q.astype(np.float32)
    scale = np.asarray(scale, np.float32)
    zero = np.asarray(zero, np.float32)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), (zero.reshape(shape) if zero.size > 1 else zero)
    return (q - zero) * scale


def split_weight_norm(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a folded weight-norm weight into (g, v) along axis 0, safely for zero rows."""
    flat = w.reshape(w.shape[0], -1).astype(np.float64)
    norm = np.sqrt((flat * flat).sum(axis=1))
    zero = norm == 0
    v = w.astype(np.float32).copy()
    v.reshape(w.shape[0], -1)[zero] = 1.0  # any non-zero direction; g = 0 keeps the row zero
    g = np.where(zero, 0.0, norm).astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
    return g, v


def _lstm(prefix: str, w: np.ndarray, r: np.ndarray, b: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """ONNX W (dirs, in, 4H), R (dirs, H, 4H), B (dirs, 8H) -> PyTorch LSTM tensors."""
    hidden = r.shape[1]

    def reorder(m: np.ndarray) -> np.ndarray:  # gates on axis 0
        return np.concatenate([m[i * hidden:(i + 1) * hidden] for i in _ONNX_TO_TORCH_GATES])

    for d, suffix in enumerate(("", "_reverse")[: w.shape[0]]):
        yield f"{prefix}.weight_ih_l0{suffix}", reorder(w[d].T)
        yield f"{prefix}.weight_hh_l0{suffix}", reorder(r[d].T)
        yield f"{prefix}.bias_ih_l0{suffix}", reorder(b[d, : 4 * hidden])
        yield f"{prefix}.bias_hh_l0{suffix}", reorder(b[d, 4 * hidden:])


def convert(onnx_path: str) -> dict[str, np.ndarray]:
    """Return the float32 state dict (PyTorch key names) recovered from the int8 ONNX file."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(onnx_path).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    out: dict[str, np.ndarray] = {}
    done: set[str] = set()

    def put(key: str, value: np.ndarray) -> None:
        if not key.startswith(_NOT_WEIGHTS):
            out[key] = np.ascontiguousarray(value, dtype=np.float32)

    def put_weight(module: str, w: np.ndarray, weight_norm: bool) -> None:
        if weight_norm:
            g, v = split_weight_norm(w)
            put(f"{module}.weight_g", g)
            put(f"{module}.weight_v", v)
        else:
            put(f"{module}.weight", w)

    for node in graph.node:
        ins = list(node.input)
        op = node.op_type
        if op == "DynamicQuantizeLSTM" and ins[1] not in done:
            w = _dequantize(init[ins[1]], init[ins[8]], init[ins[9]], axis=0)
            r = _dequantize(init[ins[2]], init[ins[10]], init[ins[11]], axis=0)
            for key, value in _lstm(_module_from_node(node.name), w, r, init[ins[3]]):
                put(key, value)
            done.update(ins[1:4])
        elif op in ("MatMulInteger", "ConvInteger") and ins[1] in init and ins[1] not in done:
            name = ins[1]
            scale = init[name.removesuffix("_quantized") + "_scale"]
            w = _dequantize(init[name], scale, init[ins[3]], axis=-1 if op == "MatMulInteger" else 0)
            anonymous = not name.startswith(("encoder.", "decoder."))
            module = _module_from_node(node.name) if anonymous else _torch_name(name).rsplit(".", 1)[0]
            if op == "MatMulInteger":
                put(f"{module}.weight", w.T)  # ONNX keeps (in, out); Linear stores (out, in)
            else:
                put_weight(module, w, weight_norm=anonymous)
            done.add(name)
        elif op == "Gather" and ins[0].endswith("_quantized") and ins[0] not in done:
            base = ins[0].removesuffix("_quantized")
            zero_name = next(n.input[2] for n in graph.node
                             if n.op_type == "DequantizeLinear" and n.input[1] == base + "_scale")
            put(_torch_name(base), _dequantize(init[ins[0]], init[base + "_scale"], init[zero_name]))
            done.add(ins[0])
        elif op in ("Conv", "ConvTranspose") and ins[1] in init and ins[1] not in done:
            name = ins[1]
            anonymous = not name.startswith(("encoder.", "decoder."))
            module = _module_from_node(node.name) if anonymous else _torch_name(name).rsplit(".", 1)[0]
            put_weight(module, init[name], weight_norm=anonymous)
            done.add(name)
        elif op in ("MatMul", "FusedMatMul", "Gemm") and len(ins) > 1 and ins[1] in init and ins[1] not in done:
            if init[ins[1]].ndim == 2 and init[ins[1]].size > 1:
                put(f"{_module_from_node(node.name)}.weight", init[ins[1]].T)
                done.add(ins[1])

    for name, value in init.items():  # biases, norms, alphas: already named after their module
        if name in done or not name.startswith(("encoder.", "decoder.")):
            continue
        if name.endswith(("_quantized", "_scale", "_zero_point")) or "_quantized_" in name:
            continue
        if value.dtype == np.float32:
            put(_torch_name(name), value)
    return out
