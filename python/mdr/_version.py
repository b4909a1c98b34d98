# The package's version: the release of the headers in the same tree
# (include/mdr/version.h). mdr.version() reports the loaded library's.
__version__ = "0.2.0"
