"""Reading and writing a checkpoint: the strict safetensors reader and its writer, checksums and
content revisions, the file inventory, the quantization and model configs, the conversion
manifest's model, the source's identity, and the hub.
"""
