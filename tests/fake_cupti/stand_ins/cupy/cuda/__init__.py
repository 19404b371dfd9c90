from cupy.cuda import runtime
