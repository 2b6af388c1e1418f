/* torch_zyx.lazy._native: the lazy graph's node table and signature walk in C.
 *
 * Stage 2 of the flow (dispatch -> lazy graph -> kernelizer -> ...). Recording builds a few
 * graph nodes per aten op and every realization walks its graph once for the schedule
 * cache's key; in Python these were most of the per-call cost after dispatch itself. This
 * module is the same surface as nodes_py.py (the reference implementation, used where this
 * one is not built or ZYX_NATIVE=0):
 *
 *   Node(op, arg, srcs, dtype, shape)   the interned node (hash-consed: built once per key)
 *   intern(op, arg, karg, srcs, dtype, shape)   the same with ``arg`` already keyed
 *   binary_node(op, x, y, dtype), unary_node(op, x)   recording's fast constructors
 *   pending                              nodes built since the last realization (.count)
 *   signature(roots, inline_floats)      the schedule cache's key (kernelize.GraphSignature)
 *
 * The table maps a node's key (op, keyed arg, srcs, dtype, shape) to the node's address; a
 * node removes its entry when it dies, so the table holds no reference to live nodes and
 * needs no weak references. Nodes are not tracked by the cyclic GC: they only reference
 * their sources (older nodes), their arg (a buffer handle or plain values) and dtypes, so
 * they are never part of a cycle, and untracked objects cost collections nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>

typedef struct {
    PyObject_HEAD
    PyObject *op, *arg, *karg, *srcs, *dtype, *shape;
    PyObject *key; /* its key in the table */
    PyObject *weakreflist;
} NodeObject;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
} PendingObject;

static PyTypeObject NodeType;
static PyTypeObject PendingType;
static PyObject *table;          /* key -> PyLong address of the live node */
static PendingObject *pending;   /* the module's ``pending`` counter */
static PyObject *float_tag;      /* "f": floats are keyed as ("f", repr(value)) */

/* ``arg`` as keyed: floats by their repr (keeps -0.0 and nan distinct and equal to
 * themselves), tuples element by element, anything else as it is. */
static PyObject *
hashable(PyObject *arg)
{
    if (PyFloat_Check(arg)) {
        PyObject *text = PyObject_Repr(arg);
        if (text == NULL)
            return NULL;
        PyObject *keyed = PyTuple_Pack(2, float_tag, text);
        Py_DECREF(text);
        return keyed;
    }
    if (PyTuple_Check(arg)) {
        Py_ssize_t n = PyTuple_GET_SIZE(arg);
        PyObject *keyed = PyTuple_New(n);
        if (keyed == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = hashable(PyTuple_GET_ITEM(arg, i));
            if (item == NULL) {
                Py_DECREF(keyed);
                return NULL;
            }
            PyTuple_SET_ITEM(keyed, i, item);
        }
        return keyed;
    }
    Py_INCREF(arg);
    return arg;
}

/* The node of ``key`` (a new reference), built from the other arguments when it is not in
 * the table. Steals ``key``. */
static PyObject *
intern_key(PyObject *key, PyObject *op, PyObject *arg, PyObject *karg, PyObject *srcs,
           PyObject *dtype, PyObject *shape)
{
    PyObject *address = PyDict_GetItemWithError(table, key);
    if (address != NULL) {
        PyObject *existing = (PyObject *)PyLong_AsVoidPtr(address);
        Py_DECREF(key);
        Py_INCREF(existing);
        return existing;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    NodeObject *node = PyObject_New(NodeObject, &NodeType);
    if (node == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    Py_INCREF(op);
    Py_INCREF(arg);
    Py_INCREF(karg);
    Py_INCREF(srcs);
    Py_INCREF(dtype);
    Py_INCREF(shape);
    node->op = op;
    node->arg = arg;
    node->karg = karg;
    node->srcs = srcs;
    node->dtype = dtype;
    node->shape = shape;
    node->key = key;
    node->weakreflist = NULL;
    address = PyLong_FromVoidPtr(node);
    if (address == NULL || PyDict_SetItem(table, key, address) < 0) {
        Py_XDECREF(address);
        node->key = NULL; /* not entered: its dealloc must not look for it */
        Py_DECREF(key);
        Py_DECREF(node);
        return NULL;
    }
    Py_DECREF(address);
    pending->count++;
    return (PyObject *)node;
}

static PyObject *
intern_node(PyObject *op, PyObject *arg, PyObject *karg, PyObject *srcs, PyObject *dtype,
            PyObject *shape)
{
    if (!PyTuple_CheckExact(srcs) || !PyTuple_CheckExact(shape)) {
        PyErr_SetString(PyExc_TypeError, "a node's srcs and shape must be tuples");
        return NULL;
    }
    PyObject *key = PyTuple_Pack(5, op, karg, srcs, dtype, shape);
    if (key == NULL)
        return NULL;
    return intern_key(key, op, arg, karg, srcs, dtype, shape);
}

static void
node_dealloc(NodeObject *self)
{
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->key != NULL) {
        /* A node may die while an exception is being raised: keep it. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyObject *address = PyDict_GetItemWithError(table, self->key);
        if (address != NULL && PyLong_AsVoidPtr(address) == (void *)self)
            PyDict_DelItem(table, self->key);
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        Py_DECREF(self->key);
    }
    Py_DECREF(self->op);
    Py_DECREF(self->arg);
    Py_DECREF(self->karg);
    Py_DECREF(self->srcs);
    Py_DECREF(self->dtype);
    Py_DECREF(self->shape);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
node_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *op, *arg, *srcs, *dtype, *shape;
    static char *names[] = {"op", "arg", "srcs", "dtype", "shape", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:Node", names, &op, &arg, &srcs,
                                     &dtype, &shape))
        return NULL;
    /* (only plain floats and tuples are keyed otherwise, as in nodes_py.Node) */
    PyObject *karg;
    if (PyFloat_CheckExact(arg) || PyTuple_CheckExact(arg))
        karg = hashable(arg);
    else {
        Py_INCREF(arg);
        karg = arg;
    }
    if (karg == NULL)
        return NULL;
    PyObject *node = intern_node(op, arg, karg, srcs, dtype, shape);
    Py_DECREF(karg);
    return node;
}

static PyObject *
node_repr(NodeObject *self)
{
    if (self->arg == Py_None)
        return PyUnicode_FromFormat("<%U %R %R>", self->op, self->dtype, self->shape);
    return PyUnicode_FromFormat("<%U %R %R %R>", self->op, self->arg, self->dtype, self->shape);
}

static PyObject *
node_get_key(NodeObject *self, void *closure)
{
    return PyTuple_Pack(5, self->op, self->karg, self->srcs, self->dtype, self->shape);
}

static PyObject *
node_get_numel(NodeObject *self, void *closure)
{
    PyObject *numel = PyLong_FromLong(1);
    Py_ssize_t n = PyTuple_GET_SIZE(self->shape);
    for (Py_ssize_t i = 0; i < n && numel != NULL; i++) {
        PyObject *product = PyNumber_Multiply(numel, PyTuple_GET_ITEM(self->shape, i));
        Py_DECREF(numel);
        numel = product;
    }
    return numel;
}

static PyMemberDef node_members[] = {
    {"op", T_OBJECT_EX, offsetof(NodeObject, op), READONLY, NULL},
    {"arg", T_OBJECT_EX, offsetof(NodeObject, arg), READONLY, NULL},
    {"_karg", T_OBJECT_EX, offsetof(NodeObject, karg), READONLY, "arg as keyed"},
    {"srcs", T_OBJECT_EX, offsetof(NodeObject, srcs), READONLY, NULL},
    {"dtype", T_OBJECT_EX, offsetof(NodeObject, dtype), READONLY, NULL},
    {"shape", T_OBJECT_EX, offsetof(NodeObject, shape), READONLY, NULL},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"_key", (getter)node_get_key, NULL, "(op, keyed arg, srcs, dtype, shape)", NULL},
    {"numel", (getter)node_get_numel, NULL, "number of elements", NULL},
    {NULL},
};

static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_zyx.lazy._native.Node",
    .tp_basicsize = sizeof(NodeObject),
    .tp_dealloc = (destructor)node_dealloc,
    .tp_repr = (reprfunc)node_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One immutable, interned graph node (graph.py's module docstring).",
    .tp_weaklistoffset = offsetof(NodeObject, weakreflist),
    .tp_members = node_members,
    .tp_getset = node_getset,
    .tp_new = node_new,
};

static PyMemberDef pending_members[] = {
    {"count", T_PYSSIZET, offsetof(PendingObject, count), 0, "nodes built since the reset"},
    {NULL},
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torch_zyx.lazy._native.Pending",
    .tp_basicsize = sizeof(PendingObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Counts the nodes built since the last realization.",
    .tp_members = pending_members,
};

static PyObject *
py_intern(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "intern(op, arg, karg, srcs, dtype, shape)");
        return NULL;
    }
    return intern_node(args[0], args[1], args[2], args[3], args[4], args[5]);
}

static int
check_node(PyObject *x)
{
    if (Py_TYPE(x) != &NodeType) {
        PyErr_Format(PyExc_TypeError, "expected a graph Node, got %R", Py_TYPE(x));
        return 0;
    }
    return 1;
}

static PyObject *binary_op; /* "BINARY" */
static PyObject *unary_op;  /* "UNARY" */

static PyObject *
py_binary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "binary_node(op, x, y, dtype)");
        return NULL;
    }
    PyObject *op = args[0], *x = args[1], *y = args[2], *dtype = args[3];
    if (!check_node(x) || !check_node(y))
        return NULL;
    PyObject *shape = ((NodeObject *)x)->shape;
    PyObject *srcs = PyTuple_Pack(2, x, y);
    if (srcs == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(5, binary_op, op, srcs, dtype, shape);
    PyObject *node = NULL;
    if (key != NULL)
        node = intern_key(key, binary_op, op, op, srcs, dtype, shape);
    Py_DECREF(srcs);
    return node;
}

static PyObject *
py_unary_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "unary_node(op, x)");
        return NULL;
    }
    PyObject *op = args[0], *x = args[1];
    if (!check_node(x))
        return NULL;
    NodeObject *source = (NodeObject *)x;
    PyObject *srcs = PyTuple_Pack(1, x);
    if (srcs == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(5, unary_op, op, srcs, source->dtype, source->shape);
    PyObject *node = NULL;
    if (key != NULL)
        node = intern_key(key, unary_op, op, op, srcs, source->dtype, source->shape);
    Py_DECREF(srcs);
    return node;
}

static PyObject *
py_file_unfiled(PyObject *module, PyObject *unused)
{
    /* Nothing waits to be filed here: every node enters the table as it is built. */
    Py_RETURN_NONE;
}

/* Leaf abstraction of ``signature``: what is kept of each leaf, and what it binds. */
typedef struct {
    PyObject *buffers, *buffer_pos, *random_args, *scalar_dtypes, *scalar_values, *scalar_slot;
    PyObject *inline_floats;
} Leaves;

static PyObject *buffer_op, *random_op, *const_op, *scalar_tag, *kind_name, *float_kind;

/* Whether the CONST ``node`` is a run-time scalar parameter: a float dtype and a finite value
 * outside ``inline_floats`` (nodes_py.is_scalar_param). -1 on error. */
static int
is_scalar_param(NodeObject *node, PyObject *inline_floats)
{
    PyObject *kind = PyObject_GetAttr(node->dtype, kind_name);
    if (kind == NULL)
        return -1;
    int is_float = PyObject_RichCompareBool(kind, float_kind, Py_EQ);
    Py_DECREF(kind);
    if (is_float <= 0)
        return is_float;
    int inline_value = PySequence_Contains(inline_floats, node->arg);
    if (inline_value != 0)
        return inline_value < 0 ? -1 : 0;
    double value = PyFloat_AsDouble(node->arg);
    if (value == -1.0 && PyErr_Occurred())
        return -1;
    return isfinite(value) ? 1 : 0;
}

/* The keyed arg of leaf ``node`` in the signature (a new reference): its position among the
 * buffers, random parameters or scalar group, recorded in ``leaves``; NULL with no error set
 * when the leaf is kept as it is. */
static PyObject *
abstract_leaf(NodeObject *node, Leaves *leaves)
{
    if (PyUnicode_Compare(node->op, buffer_op) == 0) {
        PyObject *handle_id = PyLong_FromVoidPtr(node->arg); /* buffers by identity */
        if (handle_id == NULL)
            return NULL;
        PyObject *position = PyDict_GetItemWithError(leaves->buffer_pos, handle_id);
        if (position != NULL) {
            Py_DECREF(handle_id);
            Py_INCREF(position);
            return position;
        }
        position = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(PyList_GET_SIZE(leaves->buffers));
        if (position == NULL || PyDict_SetItem(leaves->buffer_pos, handle_id, position) < 0 ||
            PyList_Append(leaves->buffers, node->arg) < 0) {
            Py_DECREF(handle_id);
            Py_XDECREF(position);
            return NULL;
        }
        Py_DECREF(handle_id);
        return position;
    }
    if (PyUnicode_Compare(node->op, random_op) == 0) {
        PyObject *position = PyLong_FromSsize_t(PyList_GET_SIZE(leaves->random_args));
        Py_ssize_t end = PyList_GET_SIZE(leaves->random_args);
        if (position == NULL || PyList_SetSlice(leaves->random_args, end, end, node->arg) < 0) {
            Py_XDECREF(position);
            return NULL;
        }
        return position;
    }
    if (PyUnicode_Compare(node->op, const_op) != 0)
        return NULL;
    int scalar = is_scalar_param(node, leaves->inline_floats);
    if (scalar <= 0)
        return NULL;
    Py_ssize_t n_groups = PyList_GET_SIZE(leaves->scalar_dtypes), group = 0;
    while (group < n_groups && PyList_GET_ITEM(leaves->scalar_dtypes, group) != node->dtype)
        group++;
    if (group == n_groups) {
        PyObject *values = PyList_New(0);
        if (values == NULL || PyList_Append(leaves->scalar_dtypes, node->dtype) < 0 ||
            PyList_Append(leaves->scalar_values, values) < 0) {
            Py_XDECREF(values);
            return NULL;
        }
        Py_DECREF(values);
    }
    PyObject *values = PyList_GET_ITEM(leaves->scalar_values, group);
    PyObject *node_id = PyLong_FromVoidPtr(node);
    PyObject *slot = Py_BuildValue("(nn)", group, PyList_GET_SIZE(values));
    PyObject *keyed = Py_BuildValue("(On)", scalar_tag, group);
    if (node_id == NULL || slot == NULL || keyed == NULL ||
        PyDict_SetItem(leaves->scalar_slot, node_id, slot) < 0 ||
        PyList_Append(values, node->arg) < 0) {
        Py_XDECREF(node_id);
        Py_XDECREF(slot);
        Py_XDECREF(keyed);
        return NULL;
    }
    Py_DECREF(node_id);
    Py_DECREF(slot);
    return keyed;
}

/* The number of ``node`` in the walk, numbering it (and queueing it) when it is new. */
static PyObject *
number_of(PyObject *node, PyObject *positions, PyObject *nodes)
{
    PyObject *number = PyDict_GetItemWithError(positions, node);
    if (number != NULL) {
        Py_INCREF(number);
        return number;
    }
    if (PyErr_Occurred())
        return NULL;
    number = PyLong_FromSsize_t(PyList_GET_SIZE(nodes));
    if (number == NULL || PyDict_SetItem(positions, node, number) < 0 ||
        PyList_Append(nodes, node) < 0) {
        Py_XDECREF(number);
        return NULL;
    }
    return number;
}

/* The item of node ``i`` of the walk (a new reference), numbering its sources. */
static PyObject *
walk_item(NodeObject *node, PyObject *positions, PyObject *nodes, Leaves *leaves)
{
    Py_ssize_t n_srcs = PyTuple_GET_SIZE(node->srcs);
    PyObject *numbers = PyTuple_New(n_srcs);
    if (numbers == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < n_srcs; j++) {
        PyObject *number = number_of(PyTuple_GET_ITEM(node->srcs, j), positions, nodes);
        if (number == NULL) {
            Py_DECREF(numbers);
            return NULL;
        }
        PyTuple_SET_ITEM(numbers, j, number);
    }
    PyObject *arg = NULL;
    if (n_srcs == 0) {
        arg = abstract_leaf(node, leaves);
        if (arg == NULL && PyErr_Occurred()) {
            Py_DECREF(numbers);
            return NULL;
        }
    }
    PyObject *item = PyTuple_Pack(5, node->op, arg != NULL ? arg : node->karg, numbers, node->dtype,
                                  node->shape);
    Py_XDECREF(arg);
    Py_DECREF(numbers);
    return item;
}

/* signature(roots, inline_floats) -> (nodes, key, buffers, random_args, scalar_dtypes,
 * scalar_values, scalar_slot): kernelize.GraphSignature, computed in one walk (nodes_py.py's
 * ``signature`` says what each part is). */
static PyObject *
py_signature(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "signature(roots, inline_floats)");
        return NULL;
    }
    Leaves leaves = {PyList_New(0), PyDict_New(), PyList_New(0), PyList_New(0), PyList_New(0),
                     PyDict_New(), args[1]};
    PyObject *positions = PyDict_New(), *nodes = PyList_New(0), *items = PyList_New(0);
    PyObject *fast = PySequence_Fast(args[0], "signature() takes a sequence of nodes");
    PyObject *root_numbers = NULL, *key = NULL, *result = NULL;
    if (leaves.buffers == NULL || leaves.buffer_pos == NULL || leaves.random_args == NULL ||
        leaves.scalar_dtypes == NULL || leaves.scalar_values == NULL ||
        leaves.scalar_slot == NULL || positions == NULL || nodes == NULL || items == NULL ||
        fast == NULL)
        goto done;
    Py_ssize_t n_roots = PySequence_Fast_GET_SIZE(fast);
    root_numbers = PyTuple_New(n_roots);
    if (root_numbers == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n_roots; i++) {
        PyObject *root = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *number = check_node(root) ? number_of(root, positions, nodes) : NULL;
        if (number == NULL)
            goto done;
        PyTuple_SET_ITEM(root_numbers, i, number);
    }
    /* The list grows while it is walked: the loop also visits the nodes it discovers. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *item = walk_item((NodeObject *)PyList_GET_ITEM(nodes, i), positions, nodes,
                                   &leaves);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    PyObject *item_tuple = PyList_AsTuple(items);
    if (item_tuple == NULL)
        goto done;
    key = PyTuple_Pack(2, item_tuple, root_numbers);
    Py_DECREF(item_tuple);
    if (key == NULL)
        goto done;
    result = PyTuple_Pack(7, nodes, key, leaves.buffers, leaves.random_args, leaves.scalar_dtypes,
                          leaves.scalar_values, leaves.scalar_slot);
done:
    Py_XDECREF(leaves.buffers);
    Py_XDECREF(leaves.buffer_pos);
    Py_XDECREF(leaves.random_args);
    Py_XDECREF(leaves.scalar_dtypes);
    Py_XDECREF(leaves.scalar_values);
    Py_XDECREF(leaves.scalar_slot);
    Py_XDECREF(positions);
    Py_XDECREF(nodes);
    Py_XDECREF(items);
    Py_XDECREF(fast);
    Py_XDECREF(root_numbers);
    Py_XDECREF(key);
    return result;
}

static PyObject *
py_table_size(PyObject *module, PyObject *unused)
{
    return PyLong_FromSsize_t(PyDict_GET_SIZE(table));
}

static PyMethodDef module_methods[] = {
    {"intern", (PyCFunction)(void (*)(void))py_intern, METH_FASTCALL,
     "intern(op, arg, karg, srcs, dtype, shape): the node, built once per key"},
    {"binary_node", (PyCFunction)(void (*)(void))py_binary_node, METH_FASTCALL,
     "binary_node(op, x, y, dtype): BINARY op of two nodes of one shape (checked by the caller)"},
    {"unary_node", (PyCFunction)(void (*)(void))py_unary_node, METH_FASTCALL,
     "unary_node(op, x): UNARY op keeping x's dtype"},
    {"file_unfiled", py_file_unfiled, METH_NOARGS, "no-op: nodes are filed as they are built"},
    {"signature", (PyCFunction)(void (*)(void))py_signature, METH_FASTCALL,
     "signature(roots, inline_floats): kernelize.GraphSignature's parts"},
    {"table_size", py_table_size, METH_NOARGS, "live interned nodes"},
    {NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "The lazy graph's node table and signature walk.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (PyType_Ready(&NodeType) < 0 || PyType_Ready(&PendingType) < 0)
        return NULL;
    table = PyDict_New();
    float_tag = PyUnicode_InternFromString("f");
    binary_op = PyUnicode_InternFromString("BINARY");
    unary_op = PyUnicode_InternFromString("UNARY");
    buffer_op = PyUnicode_InternFromString("BUFFER");
    random_op = PyUnicode_InternFromString("RANDOM");
    const_op = PyUnicode_InternFromString("CONST");
    scalar_tag = PyUnicode_InternFromString("scalar");
    kind_name = PyUnicode_InternFromString("kind");
    float_kind = PyUnicode_InternFromString("f");
    pending = PyObject_New(PendingObject, &PendingType);
    if (table == NULL || float_tag == NULL || binary_op == NULL || unary_op == NULL ||
        buffer_op == NULL || random_op == NULL || const_op == NULL || scalar_tag == NULL ||
        kind_name == NULL || float_kind == NULL || pending == NULL)
        return NULL;
    pending->count = 0;
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&NodeType);
    if (PyModule_AddObject(module, "Node", (PyObject *)&NodeType) < 0)
        return NULL;
    Py_INCREF(pending);
    if (PyModule_AddObject(module, "pending", (PyObject *)pending) < 0)
        return NULL;
    return module;
}
