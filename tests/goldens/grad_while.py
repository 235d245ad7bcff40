def loop_while_grad(x):
    out, bprop = loop_while_fprop(x)
    dout = _rt.ones_like_value(out)
    _, d_x = bprop(dout)
    _t1 = _rt.input_grad(d_x, x)
    return _t1


def loop_while_fprop(x):
    # line 48: while s < 10.0:
    _t1, bp = _rtg.while_loop_fprop(loop_while_while48_cond, loop_while_while48_body_fprop, 1, x, where='<root>/tests/test_codegen_readable.py:48')
    s, *_ = _t1
    def loop_while_bprop(dout):
        # grad of line 48: while s < 10.0:
        _t2 = _rt.getitem_grad(_t1, 0, dout)
        env_while_loop, _, _, d_x, *_ = bp(_t2)
        _t3 = (env_while_loop, d_x)
        return _t3
    _t4 = (s, loop_while_bprop)
    return _t4


def loop_while_while48_cond(s):
    # line 48: while s < 10.0:
    _t1 = s < 10.0
    return _t1


def loop_while_while48_body_fprop(s):
    # line 49: s = s * 2.0 + jnp.sin(s)
    _t1 = s * 2.0
    _t2 = jnp.sin(s)
    s_1 = _t1 + _t2
    _t3 = (s_1,)
    def loop_while_while48_body_bprop(dout):
        d_s_1 = dout[0]
        # grad of line 49: s = s * 2.0 + jnp.sin(s)
        _t4 = _rt.sum_to(d_s_1, _t1)
        _t5 = _rt.sum_to(d_s_1, _t2, tail=True)
        _t6 = jnp.cos(s)
        _t7 = _t5 * _t6
        _t8 = _t4 * 2.0
        _t9 = _rt.sum_to(_t8, s)
        # grad of line 48: while s < 10.0:
        d_s = _rt.add_grad(_t7, _t9)
        _t10 = (EMPTY_ENV, d_s)
        return _t10
    _t11 = (_t3, loop_while_while48_body_bprop)
    return _t11
