# Big-endian integers at a C pointer, for the compiled kernels of core.store
# (encoder.py, index.py call these only in their `cython.compiled` branches,
# index.py also without the GIL; their pure-Python paths use struct).

cdef inline void put_int32(unsigned char* p, long long v) noexcept nogil:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline void put_int64(unsigned char* p, long long v) noexcept nogil:
    put_int32(p, v >> 32)
    put_int32(p + 4, v)


cdef inline int get_int32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])
