"""The process and its host: resource limits, memory, address space, native library logs and the
terminal.
"""
