def loop_for_grad(x, xs):
    out, bprop = loop_for_fprop(x, xs)
    dout = _rt.ones_like_value(out)
    _, d_x, _ = bprop(dout)
    _t1 = _rt.input_grad(d_x, x)
    return _t1


def loop_for_fprop(x, xs):
    # line 55: for v in xs:
    _t1, bp = _rtg.for_each_fprop(xs, loop_for_for55_body_fprop, 1, x, where='<root>/tests/test_codegen_readable.py:55')
    acc, *_ = _t1
    def loop_for_bprop(dout):
        # grad of line 55: for v in xs:
        _t2 = _rt.getitem_grad(_t1, 0, dout)
        env_for_each, d_xs, _, d_x, *_ = bp(_t2)
        _t3 = (env_for_each, d_x, d_xs)
        return _t3
    _t4 = (acc, loop_for_bprop)
    return _t4


def loop_for_for55_body_fprop(item, acc):
    # line 56: acc = acc * jnp.cos(v) + v * acc
    _t1 = jnp.cos(item)
    _t2 = acc * _t1
    _t3 = item * acc
    acc_1 = _t2 + _t3
    _t4 = (acc_1,)
    def loop_for_for55_body_bprop(dout):
        d_acc_1 = dout[0]
        # grad of line 56: acc = acc * jnp.cos(v) + v * acc
        _t5 = _rt.sum_to(d_acc_1, _t2)
        _t6 = _rt.sum_to(d_acc_1, _t3, tail=True)
        _t7 = _t6 * acc
        _t8 = _rt.sum_to(_t7, item)
        _t9 = _t6 * item
        _t10 = _rt.sum_to(_t9, acc)
        _t11 = _t5 * _t1
        _t12 = _rt.sum_to(_t11, acc)
        _t13 = _t5 * acc
        _t14 = _rt.sum_to(_t13, _t1)
        _t15 = jnp.sin(item)
        _t16 = -_t15
        _t17 = _t14 * _t16
        # grad of line 55: for v in xs:
        d_item = _rt.add_grad(_t8, _t17)
        d_acc = _rt.add_grad(_t10, _t12)
        _t18 = (EMPTY_ENV, d_item, d_acc)
        return _t18
    _t19 = (_t4, loop_for_for55_body_bprop)
    return _t19
