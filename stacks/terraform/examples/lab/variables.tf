variable "images" {
  description = "Directory of built golden images (`racklife image build minimal --out DIR`); null: $RACKLIFE_HOME/images."
  type        = string
  default     = null
}

variable "image" {
  description = "The image every node runs: NAME, or NAME:VERSION to pin a version."
  type        = string
  default     = "minimal"
}

variable "node_images" {
  description = "Node name -> its own image (NAME or NAME:VERSION), over var.image. A change is a reimage."
  type        = map(string)
  default     = {}
}

variable "node_pools" {
  description = "Node name -> pool. A change of a node's pool is a role swap on the next apply."
  type        = map(string)
  default = {
    "node-01" = "training"
    "node-02" = "training"
    "node-03" = "training"
    "node-04" = "inference"
  }
}

variable "training_min_nodes" {
  description = "The training pool's floor: a role swap that would leave fewer nodes in service is refused."
  type        = number
  default     = 1
}

variable "node_firmware" {
  description = "Node name -> its firmware baseline (component -> version). A change is a firmware update."
  type        = map(map(string))
  default     = {}
}

variable "firmware_files" {
  description = "Component -> the firmware image on this machine that installs the baseline's version."
  type        = map(string)
  default     = {}
}
