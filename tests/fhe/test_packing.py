"""simshard/fhe/packing.py: channel packing in power-of-two slot runs."""

import pytest

from simshard.fhe.packing import ChannelPacking


@pytest.mark.parametrize("channels, slots, width, room", [
    (16, 1024, 1024, False),  # input[16,7,7]: 16 runs of 64 fill N=2k's 1024 slots
    (8, 1024, 512, True),  # input[8,7,7]: the seed's "512 slots", room for a copy
    (512, 32768, 32768, False),  # ResNet-50 on {1,4,1}: "32K slots"
    (256, 32768, 16384, True),  # ResNet-50 on {2,8,1}: "16K slots"
    (3, 1024, 256, True),  # 3 channels take 4 runs
])
def test_width_and_room_for_a_copy(channels, slots, width, room):
    p = ChannelPacking(channels, 49, slots)
    assert p.run == 64 and p.width == width and p.fits and p.has_room_for_copy is room
    assert p.used == channels * 49 and p.utilization == pytest.approx(channels * 49 / slots)


def test_a_block_wider_than_the_ciphertext_does_not_fit():
    assert not ChannelPacking(32, 49, 1024).fits


def test_an_empty_block_is_refused():
    with pytest.raises(ValueError, match="channels and pixels"):
        ChannelPacking(0, 49, 1024)
