"""The command-line tooling behind `opforge ...`: verify, bench, check, fuzz, new (scaffold),
doctor, the YOLO and audio demos and benchmarks. It sits on top of the public API (`opforge.ops`,
`opforge.layers`, `opforge.models`, `opforge.audio`, `opforge.data`, `opforge.build`,
`opforge.onnx`, `opforge.lite`) and nothing in the public API imports it."""
