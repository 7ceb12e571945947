"""A script that reads images with OpenCV, which is not installed where the drill runs it."""

import cv2
import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="gloo")
    image = torch.from_numpy(cv2.imread("image.png"))
    print(image.shape)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
