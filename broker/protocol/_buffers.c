/*
 * A bytearray whose bytes are not set: the buffer a large request frame is received into.
 *
 * Why: bytearray(n) zeroes its n bytes before anything is received into them, a pass
 * over memory the socket overwrites at once (with the reallocations of a buffer grown
 * step by step, 14% of a broker's CPU under a Java producer's 1-2 MiB requests, perf).
 * The bytes are whatever the allocator had (other requests' bytes, once freed) until
 * received, so a caller hands the buffer on only once every byte of it has been written
 * (FrameReader in codec.py does: a frame leaves it only complete, and filled() refuses a
 * count past the frame). Pages never written are not made resident by this call, so a
 * large frame declared and never sent costs address space rather than memory.
 *
 * uninitialized(n) -> bytearray   n >= 0
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *uninitialized(PyObject *self, PyObject *arg) {
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

static PyMethodDef methods[] = {
    {"uninitialized", uninitialized, METH_O,
     "A bytearray of n bytes that are not set (see the comment at the top)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_buffers", "Buffers received into.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__buffers(void) { return PyModule_Create(&module); }
