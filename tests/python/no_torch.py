import sys
print("library loaded:", sys.modules["oomscope._torch"]._state.lib is not None)
