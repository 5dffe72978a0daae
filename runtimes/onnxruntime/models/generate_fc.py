#!/usr/bin/env python3
"""Writes the fully-connected ONNX models keepalloc's ONNX Runtime tests run.

No dependency beyond the standard library: the ONNX protobuf messages are encoded by hand
(field numbers from onnx/onnx.proto3), so the script runs without network or the `onnx`
package. The weights follow formulas the Rust tests repeat to compute an independent
reference (see `fc_weight` / `fc_bias` in tests/sessions.rs):

    W[n][k] = ((n * 7 + k * 3) % 11 - 5) / 8     (N x K, used with transB = 1)
    b[n]    = ((n * 5) % 7 - 3) / 4

Models (input X: [B, K] float, output Y: [B, N] float):
  fc_gemm_relu_4x64x32    Y = relu(X . W^T + b) with Gemm(transB=1) + Relu, B=4,  K=64,  N=32
  fc_matmul_add_8x256x128 Y = X . W^T + b with MatMul(X, W^T stored as K x N) + Add, B=8, K=256, N=128

Usage: python3 generate_fc.py [OUTPUT_DIR]   (default: the directory of this script)
"""
import os
import struct
import sys


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint((field << 3) | wire)


def f_int(field, n):
    return key(field, 0) + varint(n)


def f_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return key(field, 2) + varint(len(data)) + data


def f_float(field, x):
    return key(field, 5) + struct.pack("<f", x)


FLOAT = 1  # TensorProto.DataType.FLOAT


def tensor(name, dims, values):
    # TensorProto: dims=1 (int64), data_type=2, name=8, raw_data=9
    msg = b"".join(f_int(1, d) for d in dims)
    msg += f_int(2, FLOAT) + f_bytes(8, name)
    msg += f_bytes(9, struct.pack("<%df" % len(values), *values))
    return msg


def value_info(name, dims):
    # ValueInfoProto: name=1, type=2; TypeProto: tensor_type=1; Tensor: elem_type=1, shape=2;
    # TensorShapeProto: dim=1; Dimension: dim_value=1
    shape = b"".join(f_bytes(1, f_int(1, d)) for d in dims)
    tensor_type = f_int(1, FLOAT) + f_bytes(2, shape)
    return f_bytes(1, name) + f_bytes(2, f_bytes(1, tensor_type))


def attr_int(name, value):
    # AttributeProto: name=1, i=3, type=20 (INT = 2)
    return f_bytes(1, name) + f_int(3, value) + f_int(20, 2)


def node(op, inputs, outputs, name, attrs=()):
    # NodeProto: input=1, output=2, name=3, op_type=4, attribute=5
    msg = b"".join(f_bytes(1, i) for i in inputs)
    msg += b"".join(f_bytes(2, o) for o in outputs)
    msg += f_bytes(3, name) + f_bytes(4, op)
    msg += b"".join(f_bytes(5, a) for a in attrs)
    return msg


def model(graph_name, nodes, initializers, inputs, outputs):
    # GraphProto: node=1, name=2, initializer=5, input=11, output=12
    graph = b"".join(f_bytes(1, n) for n in nodes) + f_bytes(2, graph_name)
    graph += b"".join(f_bytes(5, t) for t in initializers)
    graph += b"".join(f_bytes(11, v) for v in inputs)
    graph += b"".join(f_bytes(12, v) for v in outputs)
    # ModelProto: ir_version=1, producer_name=2, graph=7, opset_import=8 (domain=1, version=2)
    return (
        f_int(1, 8)
        + f_bytes(2, "keepalloc generate_fc.py")
        + f_bytes(7, graph)
        + f_bytes(8, f_bytes(1, "") + f_int(2, 13))
    )


def fc_weight(n, k):
    return ((n * 7 + k * 3) % 11 - 5) / 8.0


def fc_bias(n):
    return ((n * 5) % 7 - 3) / 4.0


def gemm_relu(b, k, n):
    w = [fc_weight(i, j) for i in range(n) for j in range(k)]  # N x K
    bias = [fc_bias(i) for i in range(n)]
    nodes = [
        node("Gemm", ["X", "W", "B"], ["H"], "fc", [attr_int("transB", 1)]),
        node("Relu", ["H"], ["Y"], "relu"),
    ]
    return model(
        "fc_gemm_relu",
        nodes,
        [tensor("W", [n, k], w), tensor("B", [n], bias)],
        [value_info("X", [b, k])],
        [value_info("Y", [b, n])],
    )


def matmul_add(b, k, n):
    wt = [fc_weight(i, j) for j in range(k) for i in range(n)]  # K x N = W^T
    bias = [fc_bias(i) for i in range(n)]
    nodes = [
        node("MatMul", ["X", "WT"], ["H"], "matmul"),
        node("Add", ["H", "B"], ["Y"], "bias"),
    ]
    return model(
        "fc_matmul_add",
        nodes,
        [tensor("WT", [k, n], wt), tensor("B", [n], bias)],
        [value_info("X", [b, k])],
        [value_info("Y", [b, n])],
    )


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    models = {
        "fc_gemm_relu_4x64x32.onnx": gemm_relu(4, 64, 32),
        "fc_matmul_add_8x256x128.onnx": matmul_add(8, 256, 128),
    }
    for name, data in models.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"wrote {name} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
