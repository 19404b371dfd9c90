_backends = {}
stats = {}
started_by_someone_else = 0


def backends_are_initialized():
    return len(_backends) != 0
