"""The compiler: an ONNX model -> an executable (:mod:`arch.executable`). The front end imports,
canonicalizes and quantizes into the graph IR (:mod:`compiler.ir`); the back-end passes
(:mod:`compiler.passes`) fill a plan (:mod:`compiler.plan`) that :mod:`compiler.export` turns
into the executable. :func:`compiler.compile.compile_model` is the entry point; the zoo builds
the project's own models. Imports ``arch`` only, never ``sim`` or ``hdl_gen``."""
