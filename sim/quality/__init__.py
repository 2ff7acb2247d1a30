"""How close the int8 result is to the float model: cosine and top-1 against fp32 onnxruntime
(``accuracy``), per-layer SQNR (``sqnr``), agreement with onnxruntime's own QDQ execution
(``qdq_agreement``) and top-1 on a labelled data set (``dataset_accuracy``)."""
