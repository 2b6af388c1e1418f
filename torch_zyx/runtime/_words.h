/* One helper of the runtimes' C extensions (_launch.c, _cuda_launch.c): a 64-bit word picked out
 * of a Python sequence by a Python int index. */
#ifndef ZYX_WORDS_H
#define ZYX_WORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* ``values[index]`` (``values`` a list or tuple of ints, as PySequence_Fast gives) as 64 bits,
 * read unsigned (pointers may exceed INT64_MAX); 0 with an error set on a bad index. */
static int
word_at(PyObject *values, PyObject *index_item, uint64_t *out, const char *what)
{
    Py_ssize_t index = PyLong_AsSsize_t(index_item);
    if (index == -1 && PyErr_Occurred())
        return 0;
    if (index < 0 || index >= PySequence_Fast_GET_SIZE(values)) {
        PyErr_Format(PyExc_IndexError, "%s: index %zd out of range", what, index);
        return 0;
    }
    unsigned long long value = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(values, index));
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *out = value;
    return 1;
}

#endif
