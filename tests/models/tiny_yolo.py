"""A small YOLOv5/v8-style detector defined here (random weights), for export to ONNX.

It exercises the op mix of real YOLO exports: Conv-BN-SiLU blocks (Conv, Sigmoid, Mul after
BN folding), C2f blocks (Split + Concat), C3 blocks, SPPF (MaxPool k5 chained), nearest
Resize upsampling, a PAN neck with Concat, and a YOLOv5 head whose decoding uses
Reshape/Transpose/Sigmoid/Mul/Add/Pow/Slice/Concat.
"""
import torch
from torch import nn


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, e=1.0):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 3)
        self.cv2 = Conv(c_, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """YOLOv8 CSP block: split in two halves, chain bottlenecks, concat everything."""

    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class C3(nn.Module):
    """YOLOv5 CSP block."""

    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = c2 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c1, c_, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c_ * 4, c2, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Detect(nn.Module):
    """YOLOv5 head: per level conv -> (bs, na, ny, nx, no), sigmoid, grid/anchor decoding."""

    def __init__(self, nc, anchors, ch, strides, img_size):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, len(anchors[0]) // 2
        self.strides = strides
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        for i, s in enumerate(strides):
            ny = nx = img_size // s
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float() - 0.5
            anchor = torch.tensor(anchors[i], dtype=torch.float32).view(1, self.na, 1, 1, 2)
            self.register_buffer(f"grid{i}", grid)
            self.register_buffer(f"anchor{i}", anchor.expand(1, self.na, ny, nx, 2).contiguous())

    def forward(self, xs):
        z = []
        for i, x in enumerate(xs):
            x = self.m[i](x)
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            y = x.sigmoid()
            xy, wh, conf = y.split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 + getattr(self, f"grid{i}")) * self.strides[i]
            wh = (wh * 2) ** 2 * getattr(self, f"anchor{i}")
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class TinyYolo(nn.Module):
    def __init__(self, nc=8, img_size=320):
        super().__init__()
        self.b0 = Conv(3, 16, 3, 2)     # /2
        self.b1 = Conv(16, 32, 3, 2)    # /4
        self.b2 = C2f(32, 32, 1)
        self.b3 = Conv(32, 64, 3, 2)    # /8  -> P3
        self.b4 = C2f(64, 64, 2)
        self.b5 = Conv(64, 96, 3, 2)    # /16 -> P4
        self.b6 = C3(96, 96, 1)
        self.b7 = Conv(96, 128, 3, 2)   # /32 -> P5
        self.b8 = C2f(128, 128, 1)
        self.sppf = SPPF(128, 128)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h1 = C2f(128 + 96, 96, 1, shortcut=False)   # P4'
        self.h2 = C3(96 + 64, 64, 1, shortcut=False)     # P3 out
        self.d1 = Conv(64, 64, 3, 2)
        self.h3 = C2f(64 + 96, 96, 1, shortcut=False)    # P4 out
        self.d2 = Conv(96, 96, 3, 2)
        self.h4 = C2f(96 + 128, 128, 1, shortcut=False)  # P5 out
        anchors = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
        self.detect = Detect(nc, anchors, (64, 96, 128), (8, 16, 32), img_size)

    def forward(self, x):
        x = self.b1(self.b0(x))
        p3 = self.b4(self.b3(self.b2(x)))
        p4 = self.b6(self.b5(p3))
        p5 = self.sppf(self.b8(self.b7(p4)))
        n4 = self.h1(torch.cat((self.up(p5), p4), 1))
        o3 = self.h2(torch.cat((self.up(n4), p3), 1))
        o4 = self.h3(torch.cat((self.d1(o3), n4), 1))
        o5 = self.h4(torch.cat((self.d2(o4), p5), 1))
        return self.detect([o3, o4, o5])
