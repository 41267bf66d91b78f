"""YOLOv5s (6.x/7.0) and YOLOv8n graphs, re-implemented from ultralytics' blocks.

ultralytics is not installed on the GPU machine, so these modules rebuild the two
detectors layer for layer: the same blocks (Conv = Conv2d + BatchNorm2d + SiLU, C3,
C2f, SPPF, the v5 6.x stem's 6x6 stride-2 conv instead of Focus, nearest Upsample x2,
Concat), the same yaml topologies with their depth/width scaling (v5s: depth 0.33,
width 0.50; v8n: depth 0.33, width 0.25, max channels 1024), BatchNorm eps 1e-3
(ultralytics' initialize_weights), the detection-bias priors, and the inference
heads as exported (v5: sigmoid, xy*2-0.5+grid, wh (2*sig)^2*anchor, output
[B, 25200, 85] at 640; v8: DFL softmax over 16 bins, conv-weighted sum, dist2bbox,
output [B, 84, 8400] at 640). Parameter counts match ultralytics' model summaries
(v5s 7,235,389; v8n 3,157,200).
"""
import math

import torch
from torch import nn


def make_divisible(x, divisor=8):
    return math.ceil(x / divisor) * divisor


def autopad(k, p=None):
    return k // 2 if p is None else p


class Conv(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + SiLU."""

    def __init__(self, c1, c2, k=1, s=1, p=None, g=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """v5: 1x1 then 3x3; v8: k=(3, 3). Residual when shortcut and c1 == c2."""

    def __init__(self, c1, c2, shortcut=True, g=1, k=(1, 3), e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0], 1)
        self.cv2 = Conv(c_, c2, k[1], 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with 3 convolutions (YOLOv5)."""

    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, k=(1, 3), e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C2f(nn.Module):
    """CSP bottleneck with 2 convolutions, every bottleneck's output concatenated (YOLOv8)."""

    def __init__(self, c1, c2, n=1, shortcut=False, g=1, e=0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=(3, 3), e=1.0) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools."""

    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Concat(nn.Module):
    def __init__(self, dimension=1):
        super().__init__()
        self.d = dimension

    def forward(self, x):
        return torch.cat(x, self.d)


class DetectV5(nn.Module):
    """YOLOv5 Detect head, inference/export form: decoded boxes [B, sum(na*ny*nx), nc+5]."""

    def __init__(self, nc=80, anchors=(), ch=(), stride=(8, 16, 32)):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer("stride", torch.tensor(stride, dtype=torch.float32))
        # As in yolov5: anchors are stored divided by the stride, anchor_grid = anchors * stride.
        a = torch.tensor(anchors, dtype=torch.float32).view(self.nl, -1, 2)
        self.register_buffer("anchors", a / self.stride.view(-1, 1, 1))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)
        for mi, s in zip(self.m, stride):  # yolov5 Model._initialize_biases
            b = mi.bias.view(self.na, -1)
            with torch.no_grad():
                b[:, 4] += math.log(8 / (640 / s) ** 2)
                b[:, 5:5 + nc] += math.log(0.6 / (nc - 0.99))

    def _make_grid(self, nx, ny, i):
        d, t = self.anchors[i].device, self.anchors[i].dtype
        shape = 1, self.na, ny, nx, 2
        y, x = torch.arange(ny, device=d, dtype=t), torch.arange(nx, device=d, dtype=t)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5  # add grid offset, i.e. y = 2.0 * x - 0.5
        anchor_grid = (self.anchors[i] * self.stride[i]).view((1, self.na, 1, 1, 2)).expand(shape)
        return grid, anchor_grid

    def forward(self, x):
        z = []
        for i in range(self.nl):
            xi = self.m[i](x[i])
            bs, _, ny, nx = xi.shape
            xi = xi.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            grid, anchor_grid = self._make_grid(nx, ny, i)
            xy, wh, conf = xi.sigmoid().split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 + grid) * self.stride[i]
            wh = (wh * 2) ** 2 * anchor_grid
            y = torch.cat((xy, wh, conf), 4)
            z.append(y.view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class DFL(nn.Module):
    """Distribution focal loss integral: softmax over reg_max bins, weighted by 0..reg_max-1 (a fixed 1x1 conv)."""

    def __init__(self, c1=16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)
        self.c1 = c1

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats, strides, grid_cell_offset=0.5):
    anchor_points, stride_tensor = [], []
    dtype, device = feats[0].dtype, feats[0].device
    for i, stride in enumerate(strides):
        _, _, h, w = feats[i].shape
        sx = torch.arange(end=w, device=device, dtype=dtype) + grid_cell_offset
        sy = torch.arange(end=h, device=device, dtype=dtype) + grid_cell_offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), float(stride), dtype=dtype, device=device))
    return torch.cat(anchor_points), torch.cat(stride_tensor)


def dist2bbox(distance, anchor_points, xywh=True, dim=-1):
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    if xywh:
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)
    return torch.cat((x1y1, x2y2), dim)


class DetectV8(nn.Module):
    """YOLOv8 Detect head (anchor-free, DFL), inference/export form: [B, 4 + nc, sum(ny*nx)]."""

    def __init__(self, nc=80, ch=(), stride=(8, 16, 32)):
        super().__init__()
        self.nc = nc
        self.nl = len(ch)
        self.reg_max = 16
        self.no = nc + self.reg_max * 4
        self.stride = tuple(float(s) for s in stride)
        c2, c3 = max((16, ch[0] // 4, self.reg_max * 4)), max(ch[0], min(self.nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, self.nc, 1)) for x in ch)
        self.dfl = DFL(self.reg_max)
        for a, b, s in zip(self.cv2, self.cv3, stride):  # ultralytics Detect.bias_init
            with torch.no_grad():
                a[-1].bias.data[:] = 1.0
                b[-1].bias.data[:nc] = math.log(5 / nc / (640 / s) ** 2)

    def forward(self, x):
        x = [torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1) for i in range(self.nl)]
        b = x[0].shape[0]
        x_cat = torch.cat([xi.view(b, self.no, -1) for xi in x], 2)
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(x, self.stride, 0.5))
        box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
        dbox = dist2bbox(self.dfl(box), anchors.unsqueeze(0), xywh=True, dim=1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class YoloGraph(nn.Module):
    """A yaml-style layer list: each entry (from, module); outputs kept where later layers read them."""

    def __init__(self, layers):
        super().__init__()
        self.froms = [f for f, _ in layers]
        self.model = nn.ModuleList(m for _, m in layers)
        self.save = sorted({i for f in self.froms for i in ([f] if isinstance(f, int) else f) if i != -1})

    def forward(self, x):
        y = []
        for i, (f, m) in enumerate(zip(self.froms, self.model)):
            if f != -1:
                x = y[f] if isinstance(f, int) else [x if j == -1 else y[j] for j in f]
            x = m(x)
            y.append(x if i in self.save else None)
        return x


def _yolo(spec, depth, width, max_channels, detect):
    """Builds a YoloGraph from (from, repeats, kind, args) rows as in the ultralytics yaml files."""
    ch = [3]  # as ultralytics' parse_model: after layer 0, ch[i] is layer i's output channels
    layers = []
    for i, (f, n, kind, args) in enumerate(spec):
        n = max(round(n * depth), 1) if n > 1 else n
        if kind in ("Conv", "C3", "C2f", "SPPF"):
            c1 = ch[f]
            c2 = make_divisible(min(args[0], max_channels) * width, 8)
            if kind == "Conv":
                m = Conv(c1, c2, *args[1:])
            elif kind == "SPPF":
                m = SPPF(c1, c2, *args[1:])
            elif kind == "C3":
                m = C3(c1, c2, n, *args[1:])
            else:
                m = C2f(c1, c2, n, *args[1:])
        elif kind == "Upsample":
            m, c2 = nn.Upsample(None, 2, "nearest"), ch[f]
        elif kind == "Concat":
            m, c2 = Concat(1), sum(ch[x] for x in f)
        elif kind == "Detect":
            m, c2 = detect([ch[x] for x in f]), None
        else:
            raise ValueError(kind)
        layers.append((f, m))
        if i == 0:
            ch = []
        ch.append(c2)
    return YoloGraph(layers)


# yolov5s.yaml (v6.0+): backbone and head.
V5_SPEC = [
    (-1, 1, "Conv", [64, 6, 2, 2]),  # 0-P1/2
    (-1, 1, "Conv", [128, 3, 2]),  # 1-P2/4
    (-1, 3, "C3", [128]),
    (-1, 1, "Conv", [256, 3, 2]),  # 3-P3/8
    (-1, 6, "C3", [256]),
    (-1, 1, "Conv", [512, 3, 2]),  # 5-P4/16
    (-1, 9, "C3", [512]),
    (-1, 1, "Conv", [1024, 3, 2]),  # 7-P5/32
    (-1, 3, "C3", [1024]),
    (-1, 1, "SPPF", [1024, 5]),  # 9
    (-1, 1, "Conv", [512, 1, 1]),
    (-1, 1, "Upsample", []),
    ([-1, 6], 1, "Concat", []),  # cat backbone P4
    (-1, 3, "C3", [512, False]),  # 13
    (-1, 1, "Conv", [256, 1, 1]),
    (-1, 1, "Upsample", []),
    ([-1, 4], 1, "Concat", []),  # cat backbone P3
    (-1, 3, "C3", [256, False]),  # 17 (P3/8-small)
    (-1, 1, "Conv", [256, 3, 2]),
    ([-1, 14], 1, "Concat", []),  # cat head P4
    (-1, 3, "C3", [512, False]),  # 20 (P4/16-medium)
    (-1, 1, "Conv", [512, 3, 2]),
    ([-1, 10], 1, "Concat", []),  # cat head P5
    (-1, 3, "C3", [1024, False]),  # 23 (P5/32-large)
    ([17, 20, 23], 1, "Detect", []),
]
V5_ANCHORS = ([10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326])

# yolov8.yaml, scale n.
V8_SPEC = [
    (-1, 1, "Conv", [64, 3, 2]),  # 0-P1/2
    (-1, 1, "Conv", [128, 3, 2]),  # 1-P2/4
    (-1, 3, "C2f", [128, True]),
    (-1, 1, "Conv", [256, 3, 2]),  # 3-P3/8
    (-1, 6, "C2f", [256, True]),
    (-1, 1, "Conv", [512, 3, 2]),  # 5-P4/16
    (-1, 6, "C2f", [512, True]),
    (-1, 1, "Conv", [1024, 3, 2]),  # 7-P5/32
    (-1, 3, "C2f", [1024, True]),
    (-1, 1, "SPPF", [1024, 5]),  # 9
    (-1, 1, "Upsample", []),
    ([-1, 6], 1, "Concat", []),  # cat backbone P4
    (-1, 3, "C2f", [512]),  # 12
    (-1, 1, "Upsample", []),
    ([-1, 4], 1, "Concat", []),  # cat backbone P3
    (-1, 3, "C2f", [256]),  # 15 (P3/8-small)
    (-1, 1, "Conv", [256, 3, 2]),
    ([-1, 12], 1, "Concat", []),  # cat head P4
    (-1, 3, "C2f", [512]),  # 18 (P4/16-medium)
    (-1, 1, "Conv", [512, 3, 2]),
    ([-1, 9], 1, "Concat", []),  # cat head P5
    (-1, 3, "C2f", [1024]),  # 21 (P5/32-large)
    ([15, 18, 21], 1, "Detect", []),
]


def yolov5s(nc=80):
    return _yolo(V5_SPEC, 0.33, 0.50, 1 << 30, lambda ch: DetectV5(nc, V5_ANCHORS, ch))


def yolov8n(nc=80):
    return _yolo(V8_SPEC, 0.33, 0.25, 1024, lambda ch: DetectV8(nc, ch))
