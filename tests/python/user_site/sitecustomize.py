# A user's own sitecustomize: oomscope's must chain to it.
import sys
print("user sitecustomize ran", file=sys.stderr)
