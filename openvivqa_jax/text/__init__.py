"""Vietnamese text rules: normalization, SentencePiece tokenizer, answer vocabulary with OCR slots."""
