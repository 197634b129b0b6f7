//! ONNX import for memplan: reads `.onnx` model files into the `memplan-ir` graph, inferring
//! shapes where the file does not state them and keeping symbolic dims as IR symbols.
