"""The project logger, on mmengine's MMLogger (mmdet 2.x's ``get_root_logger``)."""
import logging

from mmengine.logging import MMLogger

__all__ = ['get_root_logger']


def get_root_logger(log_file=None, log_level=logging.INFO, name='ckptzoo'):
    """The logger of this run: console, and ``log_file`` when given (rank 0 only writes it)."""
    if MMLogger.check_instance_created(name):
        logger = MMLogger.get_instance(name)
        if log_file is None or any(getattr(h, 'baseFilename', None) == log_file
                                   for h in logger.handlers):
            return logger
        name = f'{name}:{log_file}'
    return MMLogger.get_instance(name, logger_name='ckptzoo', log_file=log_file,
                                 log_level=log_level)
