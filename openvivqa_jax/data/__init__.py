"""Input pipeline: TFDS data sources -> grain -> fixed-shape batches; OCR engines and PHOC."""
