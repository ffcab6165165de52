# Sourced by the scripts: one cargo target directory outside the clone, shared by the
# quick start, the tests and CI, so a second run rebuilds nothing.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tessera/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# ONNX Runtime is loaded at run time from the library in the onnxruntime wheel
# (scripts/setup-onnx puts it there); the face models live beside it.
export ORT_DYLIB_PATH="${ORT_DYLIB_PATH:-$HOME/.cache/tessera/onnxruntime/1.32.0/libonnxruntime.so.1.32.0}"
export TESSERA_MODELS="${TESSERA_MODELS:-$HOME/.cache/tessera/models}"
export TESSERA_MOTO_SERVER="${TESSERA_MOTO_SERVER:-$HOME/.cache/tessera/venv-aws/bin/moto_server}"
# COLMAP 4 through pycolmap (scripts/setup-pycolmap): the default engine where installed.
export TESSERA_PYCOLMAP_PYTHON="${TESSERA_PYCOLMAP_PYTHON:-$HOME/.cache/tessera/venv-pycolmap/bin/python}"
# laspy, lazrs and pyproj (scripts/setup-survey-readers): the tests' independent readers
# of the LAS, LAZ and GeoJSON exports.
export TESSERA_SURVEY_PYTHON="${TESSERA_SURVEY_PYTHON:-$HOME/.cache/tessera/venv-survey/bin/python}"
