"""What paging replaced (lessons 09, 11): the reservation allocator and the fragmentation replay."""
