"""Text generation for the runner (numpy, onnxruntime, tokenizers; no torch).

Modules, by role: ``spec`` (the manifest's generation section), ``decoder`` (the ONNX graph
with its key/value cache), ``kv_batch`` (left-padded cache rows), ``sampling``, ``detokenizer``
(streaming text and stop strings), ``sequence`` (one request), ``continuous_batch`` (one step
for all sequences, on the inference thread), ``scheduler`` (the asyncio side), ``chat_template``,
``pipeline`` (the task and its loader), ``protocol`` (OpenAI request/response shapes) and
``routes`` (HTTP). This package must not import anything from the rest of the runner that
imports it back (``app``, ``__main__``).
"""
