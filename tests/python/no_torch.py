import sys
print("library loaded:", sys.modules["oomscope_torch"]._lib is not None)
