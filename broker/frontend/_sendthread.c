/*
 * Responses sent by a thread of their own, beside the event loop.
 *
 * Why: on loopback and in a pod network alike, send() of a small response runs the
 * receiver's side of TCP and wakes the receiving thread before it returns: 15-20 us of
 * kernel time for a 60-byte Produce answer, 17% of the event loop's time with 200 producer
 * connections (py-spy, docs/performance.md). The loop is the broker's one core. A thread
 * written in Python would need the GIL around every send and made that run slower (the
 * loop and it handed the GIL back and forth); this one never takes the GIL, so the kernel's
 * work runs on another core while the loop decodes and appends the next request.
 *
 * Sender()            starts the thread; fileno() is an eventfd, readable when a channel
 *                     stalled or failed (see below), and stalled() lists their fds;
 *                     wake() wakes the thread if channels wait. send() and resume() do not
 *                     wake it: waking a sleeping thread on another core costs the waker
 *                     ~9 us here (a futex call and an interprocessor interrupt, in a VM),
 *                     half of what the send itself cost, so the loop wakes it once for all
 *                     the responses of one turn of the loop.
 * Channel(sender, fd, limit=256 KiB)
 *                     one per connection; the thread sends its bytes in the order queued.
 *   send(data) -> bool   queue a copy of data; False if the channel failed or closed, is
 *                        held (below), or if limit bytes wait already: the caller
 *                        then holds the channel and writes itself, after what it holds,
 *                        waiting for room (backpressure).
 *   hold() -> bytes      stop the thread sending on this channel, wait out a send in
 *                        progress, and hand back what is not sent yet (raises OSError if
 *                        a send failed). The loop holds the channel while it writes
 *                        anything itself (sendfile, a slow client's rest), so nothing
 *                        overtakes what was queued, and then calls
 *   resume()             the thread sends again, first what was queued meanwhile.
 *   A channel is held by the loop (hold) or by the thread when the socket took less than
 *   offered (a client that does not read: the sender's eventfd tells the loop, which
 *   writes the rest), and failed when a send failed; send() refuses meanwhile.
 *   close()              after it returns the thread never touches fd again, so the
 *                        caller may close it (a reused descriptor number gets nothing).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct ChannelObject ChannelObject;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t work;  /* the thread waits here for a channel with bytes */
    pthread_cond_t idle;  /* hold() and close() wait here for a send in progress */
    ChannelObject *ready_head, *ready_tail;
    ChannelObject *stalled_head;
    int efd;
    int thread_waiting;   /* the thread sleeps on work: send() must signal it */
    int idle_waiters;     /* callers sleeping on idle: the thread must broadcast */
    int stopping;
    int running;
    pthread_t thread;
    unsigned long long sends, bytes_sent, stalls;
} SenderObject;

struct ChannelObject {
    PyObject_HEAD
    SenderObject *sender;
    int fd;
    char *buf;            /* bytes queued and not yet handed to the thread */
    size_t len, cap;
    size_t limit;         /* send() refuses more than this queued (the caller then waits) */
    size_t inflight;      /* bytes the thread took and is sending: they count too */
    int queued;           /* in the sender's ready list */
    int busy;             /* the thread is sending from it, without the lock */
    int stalled;          /* held by the loop, or the socket was full: sends wait */
    int in_stalled_list;
    int closed;
    int error;            /* errno of a failed send, 0 if none */
    ChannelObject *next_ready, *next_stalled;
};

static PyTypeObject SenderType;
static PyTypeObject ChannelType;

/* -- lists, all under the sender's lock ------------------------------------------------ */

static void push_ready(SenderObject *s, ChannelObject *c) {
    c->queued = 1;
    c->next_ready = NULL;
    if (s->ready_tail)
        s->ready_tail->next_ready = c;
    else
        s->ready_head = c;
    s->ready_tail = c;
}

static ChannelObject *pop_ready(SenderObject *s) {
    ChannelObject *c = s->ready_head;
    if (c) {
        s->ready_head = c->next_ready;
        if (!s->ready_head)
            s->ready_tail = NULL;
        c->queued = 0;
        c->next_ready = NULL;
    }
    return c;
}

static void unlink_channel(SenderObject *s, ChannelObject *c) {
    if (c->queued) {
        ChannelObject *prev = NULL;
        for (ChannelObject *p = s->ready_head; p; prev = p, p = p->next_ready) {
            if (p == c) {
                if (prev)
                    prev->next_ready = c->next_ready;
                else
                    s->ready_head = c->next_ready;
                if (s->ready_tail == c)
                    s->ready_tail = prev;
                break;
            }
        }
        c->queued = 0;
    }
    if (c->in_stalled_list) {
        ChannelObject **pp = &s->stalled_head;
        while (*pp && *pp != c)
            pp = &(*pp)->next_stalled;
        if (*pp)
            *pp = c->next_stalled;
        c->in_stalled_list = 0;
    }
}

static void notify_loop(SenderObject *s, ChannelObject *c) {
    if (!c->in_stalled_list) {
        c->in_stalled_list = 1;
        c->next_stalled = s->stalled_head;
        s->stalled_head = c;
    }
    uint64_t one = 1;
    ssize_t ignored = write(s->efd, &one, sizeof one);  /* only fails if it overflows */
    (void)ignored;
}

/* Append to the channel's buffer; -1 if out of memory. */
static int append(ChannelObject *c, const char *data, size_t n) {
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n)
            cap *= 2;
        char *grown = realloc(c->buf, cap);
        if (!grown)
            return -1;
        c->buf = grown;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, data, n);
    c->len += n;
    return 0;
}

/* -- the thread ------------------------------------------------------------------------ */

static void *run(void *arg) {
    SenderObject *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->ready_head && !s->stopping) {
            s->thread_waiting = 1;
            pthread_cond_wait(&s->work, &s->lock);
            s->thread_waiting = 0;
        }
        if (s->stopping)
            break;
        ChannelObject *c = pop_ready(s);
        if (c->closed || c->stalled || c->error || c->len == 0)
            continue;
        char *buf = c->buf;
        size_t len = c->len;
        c->buf = NULL;
        c->len = c->cap = 0;
        c->busy = 1;
        c->inflight = len;
        int fd = c->fd;
        pthread_mutex_unlock(&s->lock);

        size_t off = 0;
        int err = 0;
        while (off < len) {
            ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno == EINTR)
                continue;
            else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            else {
                err = n < 0 ? errno : EPIPE;
                break;
            }
        }

        pthread_mutex_lock(&s->lock);
        c->busy = 0;
        c->inflight = 0;
        s->sends++;
        s->bytes_sent += off;
        if (err) {
            c->error = err;
            notify_loop(s, c);
        } else if (off < len) {
            /* The socket is full: the rest goes back in front of what came meanwhile. */
            size_t rest = len - off;
            char *joined = malloc(rest + c->len + 1);
            if (!joined) {
                c->error = ENOMEM;
            } else {
                memcpy(joined, buf + off, rest);
                if (c->len)
                    memcpy(joined + rest, c->buf, c->len);
                free(c->buf);
                c->buf = joined;
                c->len += rest;
                c->cap = c->len + 1;
                c->stalled = 1;
                s->stalls++;
            }
            notify_loop(s, c);
        } else if (c->len && !c->closed && !c->queued) {
            push_ready(s, c);  /* more was queued while this was sent */
        }
        free(buf);
        if (s->idle_waiters)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* -- Sender ---------------------------------------------------------------------------- */

static PyObject *Sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return NULL;
    SenderObject *s = (SenderObject *)type->tp_alloc(type, 0);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    s->running = 1;
    return (PyObject *)s;
}

static void stop_thread(SenderObject *s) {
    if (!s->running)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    Py_END_ALLOW_THREADS
    s->running = 0;
}

static void Sender_dealloc(SenderObject *s) {
    /* Channels hold a reference to their sender: none is left when this runs. */
    stop_thread(s);
    if (s->efd >= 0)
        close(s->efd);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Sender_fileno(SenderObject *s, PyObject *unused) {
    return PyLong_FromLong(s->efd);
}

static PyObject *Sender_stalled(SenderObject *s, PyObject *unused) {
    uint64_t count;
    while (read(s->efd, &count, sizeof count) > 0)
        ;
    PyObject *fds = PyList_New(0);
    if (!fds)
        return NULL;
    pthread_mutex_lock(&s->lock);
    int failed = 0;
    for (ChannelObject *c = s->stalled_head; c && !failed; c = c->next_stalled) {
        PyObject *fd = PyLong_FromLong(c->fd);
        if (!fd || PyList_Append(fds, fd) < 0)
            failed = 1;
        Py_XDECREF(fd);
    }
    if (failed) {
        /* The list stays as it is, and the eventfd says so again: the next call
         * reports them. */
        uint64_t one = 1;
        ssize_t ignored = write(s->efd, &one, sizeof one);
        (void)ignored;
    } else {
        ChannelObject *c = s->stalled_head;
        s->stalled_head = NULL;
        while (c) {
            ChannelObject *next = c->next_stalled;
            c->in_stalled_list = 0;
            c->next_stalled = NULL;
            c = next;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (failed) {
        Py_DECREF(fds);
        return NULL;
    }
    return fds;
}

static PyObject *Sender_wake(SenderObject *s, PyObject *unused) {
    pthread_mutex_lock(&s->lock);
    if (s->thread_waiting && s->ready_head)
        pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    Py_RETURN_NONE;
}

static PyObject *Sender_stats(SenderObject *s, PyObject *unused) {
    pthread_mutex_lock(&s->lock);
    unsigned long long sends = s->sends, bytes = s->bytes_sent, stalls = s->stalls;
    pthread_mutex_unlock(&s->lock);
    return Py_BuildValue("(KKK)", sends, bytes, stalls);
}

static PyObject *Sender_stop(SenderObject *s, PyObject *unused) {
    stop_thread(s);
    Py_RETURN_NONE;
}

static PyMethodDef Sender_methods[] = {
    {"fileno", (PyCFunction)Sender_fileno, METH_NOARGS,
     "The eventfd that is readable when a channel stalled or failed."},
    {"stalled", (PyCFunction)Sender_stalled, METH_NOARGS,
     "The fds of the channels that stalled or failed since the last call."},
    {"wake", (PyCFunction)Sender_wake, METH_NOARGS,
     "Wake the thread if channels wait for it (after send() and resume())."},
    {"stats", (PyCFunction)Sender_stats, METH_NOARGS, "(sends, bytes sent, stalls)."},
    {"stop", (PyCFunction)Sender_stop, METH_NOARGS,
     "Stop the thread; channels keep what they hold, for hold()."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker.frontend._sendthread.Sender",
    .tp_basicsize = sizeof(SenderObject),
    .tp_dealloc = (destructor)Sender_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The thread that sends the channels' bytes (see the module's comment).",
    .tp_methods = Sender_methods,
    .tp_new = Sender_new,
};

/* -- Channel --------------------------------------------------------------------------- */

static PyObject *Channel_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sender", "fd", "limit", NULL};
    PyObject *sender;
    int fd;
    Py_ssize_t limit = 256 << 10;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!i|n", kwlist, &SenderType, &sender, &fd,
                                     &limit))
        return NULL;
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "a channel's limit is at least 1 byte");
        return NULL;
    }
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "a channel needs an open descriptor");
        return NULL;
    }
    ChannelObject *c = (ChannelObject *)type->tp_alloc(type, 0);
    if (!c)
        return NULL;
    Py_INCREF(sender);
    c->sender = (SenderObject *)sender;
    c->fd = fd;
    c->limit = (size_t)limit;
    return (PyObject *)c;
}

/* With the lock held and the GIL released: wait until the thread is not sending from c. */
static void wait_idle(SenderObject *s, ChannelObject *c) {
    while (c->busy) {
        s->idle_waiters++;
        pthread_cond_wait(&s->idle, &s->lock);
        s->idle_waiters--;
    }
}

static void close_channel(ChannelObject *c) {
    SenderObject *s = c->sender;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->lock);
    c->closed = 1;
    wait_idle(s, c);
    unlink_channel(s, c);
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    pthread_mutex_unlock(&s->lock);
    Py_END_ALLOW_THREADS
}

static void Channel_dealloc(ChannelObject *c) {
    close_channel(c);
    Py_DECREF(c->sender);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Channel_send(ChannelObject *c, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    SenderObject *s = c->sender;
    int queued = 0, oom = 0;
    /* The thread holds the lock only to move pointers, so taking it with the GIL held
     * costs the loop nothing noticeable, and the thread never waits for the GIL. */
    pthread_mutex_lock(&s->lock);
    /* Past the limit the caller writes itself, holding the channel, and waits for room:
     * a client that does not read holds back its connection, as MAX_IN_FLIGHT intends. */
    size_t queued_bytes = c->len + c->inflight;
    int room = queued_bytes == 0 || queued_bytes + (size_t)view.len <= c->limit;
    if (!c->closed && !c->error && !c->stalled && s->running && !s->stopping && room) {
        if (append(c, view.buf, (size_t)view.len) < 0) {
            oom = 1;
        } else {
            queued = 1;
            if (!c->busy && !c->queued)
                push_ready(s, c);
        }
    }
    pthread_mutex_unlock(&s->lock);
    PyBuffer_Release(&view);
    if (oom)
        return PyErr_NoMemory();
    return PyBool_FromLong(queued);
}

static PyObject *Channel_hold(ChannelObject *c, PyObject *unused) {
    SenderObject *s = c->sender;
    char *buf;
    size_t len;
    int err;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->lock);
    wait_idle(s, c);
    buf = c->buf;
    len = c->len;
    c->buf = NULL;
    c->len = c->cap = 0;
    c->stalled = 1;  /* held: what is queued from now on waits for resume() */
    err = c->error;
    unlink_channel(s, c);
    pthread_mutex_unlock(&s->lock);
    Py_END_ALLOW_THREADS
    if (err) {
        free(buf);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *data = PyBytes_FromStringAndSize(buf ? buf : "", (Py_ssize_t)len);
    free(buf);
    if (!data) {  /* those bytes are gone: the connection must end, not skip them */
        pthread_mutex_lock(&s->lock);
        c->error = ENOMEM;
        pthread_mutex_unlock(&s->lock);
    }
    return data;
}

static PyObject *Channel_resume(ChannelObject *c, PyObject *unused) {
    SenderObject *s = c->sender;
    pthread_mutex_lock(&s->lock);
    c->stalled = 0;
    if (c->len && !c->closed && !c->error && !c->queued && !c->busy)
        push_ready(s, c);
    pthread_mutex_unlock(&s->lock);
    Py_RETURN_NONE;
}

static PyObject *Channel_close(ChannelObject *c, PyObject *unused) {
    close_channel(c);
    Py_RETURN_NONE;
}

static PyObject *Channel_get_pending(ChannelObject *c, void *closure) {
    pthread_mutex_lock(&c->sender->lock);
    int pending = c->len > 0 || c->busy || c->stalled || c->error;
    pthread_mutex_unlock(&c->sender->lock);
    return PyBool_FromLong(pending);
}

static PyObject *Channel_get_fd(ChannelObject *c, void *closure) {
    return PyLong_FromLong(c->fd);
}

static PyMethodDef Channel_methods[] = {
    {"send", (PyCFunction)Channel_send, METH_O,
     "Queue a copy of the bytes; False if the channel failed, is closed, held or full."},
    {"hold", (PyCFunction)Channel_hold, METH_NOARGS,
     "Stop the thread sending; what it has not sent, after any send in progress. Raises "
     "OSError if a send failed."},
    {"resume", (PyCFunction)Channel_resume, METH_NOARGS,
     "Let the thread send again, beginning with what was queued while held."},
    {"close", (PyCFunction)Channel_close, METH_NOARGS,
     "Stop sending; the thread never touches the fd after this returns."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Channel_getset[] = {
    {"pending", (getter)Channel_get_pending, NULL,
     "Bytes queued, being sent, stalled, or an error to report.", NULL},
    {"fd", (getter)Channel_get_fd, NULL, "The descriptor it sends on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ChannelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker.frontend._sendthread.Channel",
    .tp_basicsize = sizeof(ChannelObject),
    .tp_dealloc = (destructor)Channel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One connection's bytes, sent in order by the sender's thread.",
    .tp_methods = Channel_methods,
    .tp_getset = Channel_getset,
    .tp_new = Channel_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sendthread", "Responses sent by a thread beside the event loop.",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sendthread(void) {
    if (PyType_Ready(&SenderType) < 0 || PyType_Ready(&ChannelType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&SenderType);
    Py_INCREF(&ChannelType);
    if (PyModule_AddObject(m, "Sender", (PyObject *)&SenderType) < 0 ||
        PyModule_AddObject(m, "Channel", (PyObject *)&ChannelType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
