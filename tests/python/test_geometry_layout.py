"""The geometry record's field positions Python reads (boxes, masks and keypoints of a Joint
follow the pixels by them) are the native record's (pipeline/views.h GeometryField, exported
as ``_C.GEOMETRY_LAYOUT``): a field added or moved in C++ fails here, not as shifted boxes."""
from ringloader import _C
from ringloader.transforms import _detection


def test_the_layout_names_every_field():
    assert len(_C.GEOMETRY_LAYOUT) == _C.GEOMETRY_FIELDS
    assert len(set(_C.GEOMETRY_LAYOUT)) == _C.GEOMETRY_FIELDS


def test_pythons_named_positions_are_the_native_ones():
    layout = _C.GEOMETRY_LAYOUT
    assert _detection._ANGLE == layout.index("angle")
    assert _detection._DRAW_SEED == layout.index("draw_seed")
    # The rotation's draws follow the angle in make_params' order.
    assert layout[_detection._ANGLE:] == ("angle", "translate_x", "translate_y", "scale", "shear_x", "shear_y")


def test_the_literal_positions_python_reads_are_the_native_ones():
    # _joint.py and _detection.py read the crop rectangle, output size, flips and keypoint
    # offsets as g[2]..g[11]: these are the names those lines mean.
    layout = _C.GEOMETRY_LAYOUT
    assert layout[:12] == ("src_w", "src_h", "left", "top", "right", "bottom", "out_w", "out_h",
                           "hflip", "vflip", "key_dx", "key_dy")
